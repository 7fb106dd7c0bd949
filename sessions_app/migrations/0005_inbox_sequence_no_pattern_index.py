# InboxSequence's primary key is compared whole, never with LIKE (core.pattern_indexes). A
# migration of its own: Django makes the `_like` index of a new table at the end of the migration
# that creates it, after any operation there could drop it.

from django.db import migrations

from core.pattern_indexes import drop_pattern_indexes


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0004_inbox_seq"),
    ]

    operations = [
        drop_pattern_indexes("sessions_app_inboxsequence"),
    ]
