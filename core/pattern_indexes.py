"""Drop the `…_like` indexes Django adds on PostgreSQL to every indexed text column.

Django gives each CharField that is a primary key, unique or db_index a second btree with
`varchar_pattern_ops`, for `LIKE 'prefix%'` under a non-C collation. dshloop runs no such
query (IDs are compared whole), yet every insert and every non-HOT update of a run, a loop or
an inbox message would write those indexes too: 3 of a run's 8 indexes. A migration of the field
(AlterField) would make its index again; drop it again in that migration.
"""

from __future__ import annotations

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps


def drop_pattern_indexes(*tables: str) -> migrations.RunPython:
    def forward(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
                " AND tablename = ANY(%s) AND indexdef LIKE '%%varchar_pattern_ops%%'",
                [list(tables)],
            )
            for (name,) in cursor.fetchall():
                schema_editor.execute(f"DROP INDEX {schema_editor.quote_name(name)}")

    # Backwards: nothing to restore that a query needs (the indexes served no query).
    return migrations.RunPython(forward, migrations.RunPython.noop, elidable=True)
