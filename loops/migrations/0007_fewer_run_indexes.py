# Fewer index writes per occurrence: run_loop_idx (loop_id, -scheduled_at) serves
# every query by loop_id, so its own index is dropped, and so are the LIKE-only `_like` indexes
# of the loop and run tables (core.pattern_indexes).

from django.db import migrations, models

from core.pattern_indexes import drop_pattern_indexes


class Migration(migrations.Migration):

    dependencies = [
        ('loops', '0006_loop_list_idx'),
    ]

    operations = [
        migrations.AlterField(
            model_name='looprun',
            name='loop_id',
            field=models.CharField(max_length=40),
        ),
        drop_pattern_indexes('loops_loop', 'loops_looprun'),
    ]
