# The inbox is paged in commit order (InboxMessage.seq, numbered per session under the lock of its
# InboxSequence row) instead of by created_at, which a later commit can undercut.
#
# Existing messages are numbered per session by (created_at, message_id), the order they were
# listed in until now, and each session's counter starts after its last message.

from django.db import migrations, models


def number_existing_messages(apps, schema_editor):
    quote = schema_editor.quote_name
    inbox = quote(apps.get_model("sessions_app", "InboxMessage")._meta.db_table)
    counters = quote(apps.get_model("sessions_app", "InboxSequence")._meta.db_table)
    # UPDATE … FROM: PostgreSQL, and SQLite since 3.33.
    schema_editor.execute(
        f"UPDATE {inbox} SET seq = numbered.seq FROM ("
        f"SELECT message_id, ROW_NUMBER() OVER (PARTITION BY session_id ORDER BY created_at, message_id) AS seq"
        f" FROM {inbox}) AS numbered WHERE {inbox}.message_id = numbered.message_id"
    )
    schema_editor.execute(
        f"INSERT INTO {counters} (session_id, last_seq) SELECT session_id, MAX(seq) FROM {inbox} GROUP BY session_id"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0003_no_pattern_indexes"),
    ]

    operations = [
        migrations.CreateModel(
            name="InboxSequence",
            fields=[
                ("session_id", models.CharField(max_length=255, primary_key=True, serialize=False)),
                ("last_seq", models.BigIntegerField()),
            ],
        ),
        migrations.AddField(
            model_name="inboxmessage",
            name="seq",
            field=models.BigIntegerField(default=0),
            preserve_default=False,
        ),
        migrations.RunPython(number_existing_messages, migrations.RunPython.noop),
        migrations.RemoveIndex(model_name="inboxmessage", name="inbox_session_idx"),
        migrations.AddConstraint(
            model_name="inboxmessage",
            constraint=models.UniqueConstraint(fields=("session_id", "seq"), name="inbox_session_seq"),
        ),
    ]
