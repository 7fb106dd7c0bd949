# A message's seq is taken in the INSERT that writes it, after the highest of its session's, under
# a per-session advisory lock (services.inbox_deliver_many): the counter row that every delivery
# updated per session goes. The numbers given so far stay; the next continue after the highest.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0005_inbox_sequence_no_pattern_index"),
    ]

    operations = [
        migrations.DeleteModel(name="InboxSequence"),
    ]
