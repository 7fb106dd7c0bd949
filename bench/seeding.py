"""Rows seeded the benchmark's way (INSERT … SELECT generate_series: a million loops in seconds),
with their columns taken from the models, not restated here.

The bench names only the columns it sets (the SQL expression of each, over the series' `i`); every
other column of the model gets its default, so a column a migration adds with a default needs no
change here, and one added without a default (NOT NULL) makes the insert fail loudly, at once, in
`make test` (tests/bench/test_seeding.py), not silently months later in `make bench`.
"""

from __future__ import annotations

from django.db import connection
from django.db.models import Model


def insert_select(model: type[Model], expressions: dict[str, str], source: str) -> tuple[str, dict]:
    """`INSERT INTO <model's table> (<every concrete column>) SELECT <each column's expression, or
    its default as a parameter> FROM <source>`, and the defaults' parameters (named `default_<column>`;
    the caller adds its own)."""
    fields = model._meta.concrete_fields
    unknown = set(expressions) - {field.column for field in fields}
    if unknown:
        raise ValueError(
            f"{model._meta.db_table} has no columns {sorted(unknown)}: the bench names columns that are gone"
        )
    columns, values, params = [], [], {}
    for field in fields:
        columns.append(field.column)
        if field.column in expressions:
            values.append(expressions[field.column])
            continue
        # What the ORM would store for a field it is not given: its default, "" for a text field.
        default = field.get_default()
        if default is None and not field.null:
            raise ValueError(
                f"{model._meta.db_table}.{field.column} has no default and the bench seeds no value for it: "
                "add it to the bench's expressions (bench/systems.py)"
            )
        name = f"default_{field.column}"
        params[name] = field.get_db_prep_save(default, connection)
        values.append(f"%({name})s")
    sql = f"INSERT INTO {model._meta.db_table} ({', '.join(columns)}) SELECT {', '.join(values)} FROM {source}"
    return sql, params
