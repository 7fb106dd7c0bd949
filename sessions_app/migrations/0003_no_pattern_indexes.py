# The inbox's LIKE-only `_like` indexes cost a write per delivered message (core.pattern_indexes).

from django.db import migrations

from core.pattern_indexes import drop_pattern_indexes


class Migration(migrations.Migration):

    dependencies = [
        ('sessions_app', '0002_inbox_created_idx'),
    ]

    operations = [
        drop_pattern_indexes('sessions_app_inboxmessage'),
    ]
