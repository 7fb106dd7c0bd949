"""Updating many rows with one statement prepared once.

Django's bulk_update builds a CASE expression per field per row, which costs milliseconds per
row in Python (measured: 2.5 s for 1,000 loops). An executemany of one prepared UPDATE costs a
fraction of that, and psycopg 3 pipelines it into a single round trip.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from django.db import connection, models


def update_rows(model: type[models.Model], fields: Sequence[str], rows: Iterable[Sequence]) -> None:
    """For each row (primary key, *values): UPDATE model SET fields = values WHERE pk = key."""
    meta = model._meta
    columns = [meta.get_field(name) for name in fields]
    quote = connection.ops.quote_name
    sql = (f"UPDATE {quote(meta.db_table)} SET "
           + ", ".join(f"{quote(column.column)} = %s" for column in columns)
           + f" WHERE {quote(meta.pk.column)} = %s")
    params = [
        [column.get_db_prep_save(value, connection) for column, value in zip(columns, values)] + [key]
        for key, *values in rows
    ]
    if params:
        with connection.cursor() as cursor:
            cursor.executemany(sql, params)
