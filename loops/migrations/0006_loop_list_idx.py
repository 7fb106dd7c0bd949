# loop_list at 100,000 loops: the list's order over the active loops, for its first page
# and each keyset page (loops.selectors.loop_rows) and the panel's pages.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('loops', '0005_run_outcomes'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='loop',
            index=models.Index(condition=models.Q(('state', 'completed'), _negated=True), fields=['next_at', 'created_at', 'loop_id'], name='loop_list_idx'),
        ),
    ]
