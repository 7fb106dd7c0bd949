"""Writing many rows with one statement: the scheduler's hot path.

Django's bulk_update builds a CASE expression per field per row, and bulk_create prepares and
quotes every value in Python: together they cost far more than the database's own work
(docs/BENCHMARKS.md measures the scheduler's writes).

On PostgreSQL a whole batch is one statement over `unnest` of one array per column, bound on the
server (Django's psycopg cursor binds on the client, quoting every value in Python); these
statements bypass Django's query logging, but not its error translation: they run inside
`connection.wrap_database_errors`, so a failure is Django's DatabaseError like any other (STYLE §18;
a raw psycopg error would escape the clock and end the scheduler). On SQLite an executemany of
one prepared statement is already cheap (no network round trips).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django.db import connection, models

# Values psycopg takes as they are: Django's per-value preparation of these only costs time
# (SQLite needs it: datetimes are stored there as naive UTC text).
_PLAIN_TYPES = {
    "CharField",
    "TextField",
    "BigIntegerField",
    "IntegerField",
    "PositiveIntegerField",
    "BooleanField",
    "DateTimeField",
}


def _stored_field(model: type[models.Model], name: str) -> models.Field[Any, Any]:
    """The field `name` of `model`, one with a column of its own: the only kind these statements write
    (a reverse relation or a generic foreign key has none)."""
    field = model._meta.get_field(name)
    assert isinstance(field, models.Field), f"{model.__name__}.{name} is not stored in a column"
    return field


def _column(field: models.Field[Any, Any]) -> str:
    """The field's column: set on every field stored in a column (django-stubs types it Optional
    for the private fields that have none)."""
    assert field.column is not None, f"{field} has no column"
    return field.column


def _preparer(column: models.Field[Any, Any]) -> Callable[[Any], Any] | None:
    """The per-value preparation a column needs, or None when psycopg takes its values as they are."""
    if connection.vendor == "postgresql" and column.get_internal_type() in _PLAIN_TYPES:
        # psycopg dumps str and int subclasses by their value: a TextChoices member is its value.
        return None
    return lambda value: column.get_db_prep_save(value, connection)


def _prepared(columns: Sequence[models.Field[Any, Any]], rows: Iterable[Sequence[Any]]) -> list[list[Any]]:
    preparers = [_preparer(column) for column in columns]
    if not any(preparers):
        return [list(row) for row in rows]
    plain = lambda value: value  # noqa: E731
    prepare_each = [prepare or plain for prepare in preparers]
    return [[prepare(value) for prepare, value in zip(prepare_each, row, strict=True)] for row in rows]


class _Unnest:
    """The rows as a table `v` for one statement: a column whose value is the same in every row is
    one scalar parameter, the others one array parameter each, all sent in binary (psycopg
    dumps array elements one by one in Python, and a batch's runs share most of their columns)."""

    def __init__(
        self, columns: Sequence[models.Field[Any, Any]], rows: list[list[Any]], arrays: Sequence[int] = ()
    ) -> None:
        """`arrays`: columns sent as arrays even when constant (the SQL names them more than once)."""
        values = [list(column) for column in zip(*rows, strict=True)]
        self.varying = [
            i for i, column in enumerate(values) if i == 0 or i in arrays or any(v != column[0] for v in column)
        ]
        self.columns, self.values = columns, values

    def value(self, index: int) -> str:
        """The SQL for column `index` of the current row: `v.<name>`, or its constant's placeholder."""
        column = self.columns[index]
        if index in self.varying:
            return f"v.{connection.ops.quote_name(_column(column))}"
        return f"%b::{column.db_type(connection)}"

    def source(self) -> str:
        quote = connection.ops.quote_name
        varying = [self.columns[i] for i in self.varying]
        arrays = ", ".join(f"%b::{column.db_type(connection)}[]" for column in varying)
        return f"unnest({arrays}) AS v({', '.join(quote(_column(column)) for column in varying)})"

    def params(self, order: Sequence[int]) -> list[Any]:
        """Parameters for SQL that names the columns in `order` (via value()) before source()."""
        constants = [self.values[i][0] for i in order if i not in self.varying]
        return constants + [self.values[i] for i in self.varying]


def _execute_unnest(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    """Run `sql` (with one _Unnest) bound on the server; returns what a RETURNING clause sent back.
    It runs on Django's connection, so inside the caller's transaction, and its errors are Django's."""
    # PostgreSQL only, where Django's backend has imported psycopg already: imported here, so that on
    # SQLite the scheduler's processes that write rows (its clock, its workers) do not load it (megabytes
    # each).
    import psycopg

    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def update_rows(model: type[models.Model], fields: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """For each row (primary key, *values): UPDATE model SET fields = values WHERE pk = key."""
    meta = model._meta
    quote = connection.ops.quote_name
    columns = [meta.pk, *(_stored_field(model, name) for name in fields)]
    params = _prepared(columns, rows)
    if not params:
        return
    table, pk = quote(meta.db_table), quote(_column(meta.pk))
    names = [quote(_column(column)) for column in columns[1:]]
    if connection.vendor == "postgresql":
        batch = _Unnest(columns, params)
        order = range(1, len(columns))
        sets = ", ".join(f"{name} = {batch.value(i)}" for name, i in zip(names, order, strict=True))
        sql = f"UPDATE {table} SET {sets} FROM {batch.source()} WHERE {table}.{pk} = v.{pk}"
        _execute_unnest(sql, batch.params(order))
        return
    sets = ", ".join(f"{name} = %s" for name in names)
    with connection.cursor() as cursor:
        cursor.executemany(f"UPDATE {table} SET {sets} WHERE {pk} = %s", [[*values, key] for key, *values in params])


def insert_rows(
    model: type[models.Model],
    fields: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    skip_conflicts_on: Sequence[str] = (),
    count_on: tuple[str, str] | None = None,
) -> set[Any]:
    """INSERT the rows (values in `fields` order; the primary key among them); returns the primary
    keys of the rows inserted. skip_conflicts_on names the fields of one unique key (a unique field,
    or a model's UniqueConstraint without a condition): a row whose value of that key exists already
    is left out (ON CONFLICT (key) DO NOTHING) and its primary key is not returned. Only that key: a
    row that breaks any other unique constraint raises IntegrityError, as a plain INSERT does, rather
    than disappearing as if it had been written before (a bare ON CONFLICT DO NOTHING skips a
    conflict on any constraint).

    count_on=(column, group): the column numbers the rows of each group on from the highest number
    stored in that group, in the statement that inserts them (no counter row to write). Give each
    row its place among the batch's rows of its group (1, 2, …), in that order; it is stored as the
    group's highest number plus its place (SQLite inserts one row after the other, each as the
    highest plus one). The caller keeps other writers of the group out until it commits."""
    meta = model._meta
    quote = connection.ops.quote_name
    columns = [_stored_field(model, name) for name in fields]
    params = _prepared(columns, rows)
    if not params:
        return set()
    table, pk = quote(meta.db_table), quote(_column(meta.pk))
    names = ", ".join(quote(_column(column)) for column in columns)
    conflict = f" ON CONFLICT ({_unique_key(model, skip_conflicts_on)}) DO NOTHING" if skip_conflicts_on else ""
    counted, group = (fields.index(count_on[0]), fields.index(count_on[1])) if count_on else (-1, -1)

    def highest(group_value: str) -> str:
        column, group_column = quote(_column(columns[counted])), quote(_column(columns[group]))
        return f"SELECT COALESCE(MAX(n.{column}), 0) FROM {table} AS n WHERE n.{group_column} = {group_value}"

    if connection.vendor == "postgresql":
        batch = _Unnest(columns, params, arrays=(counted, group) if count_on else ())
        order = range(len(columns))
        values = [batch.value(i) for i in order]
        if count_on:
            values[counted] = f"({highest(values[group])}) + {values[counted]}"
        sql = f"INSERT INTO {table} ({names}) SELECT {', '.join(values)} FROM {batch.source()}{conflict} RETURNING {pk}"
        return {key for (key,) in _execute_unnest(sql, batch.params(order))}
    placeholders = ["%s" for _ in columns]
    if count_on:
        placeholders[counted] = f"({highest('%s')}) + 1"
        params = [[row[group] if i == counted else value for i, value in enumerate(row)] for row in params]
    with connection.cursor() as cursor:
        cursor.executemany(f"INSERT INTO {table} ({names}) VALUES ({', '.join(placeholders)}){conflict}", params)
        if not skip_conflicts_on:
            return {row[fields.index(meta.pk.name)] for row in params}
        # SQLite's executemany cannot return rows: ask which of the new keys are there now.
        keys = [row[fields.index(meta.pk.name)] for row in params]
        inserted: set[Any] = set()
        for start in range(0, len(keys), _SQLITE_MAX_VARIABLES):
            chunk = keys[start : start + _SQLITE_MAX_VARIABLES]
            cursor.execute(f"SELECT {pk} FROM {table} WHERE {pk} IN ({', '.join('%s' for _ in chunk)})", chunk)
            inserted.update(key for (key,) in cursor.fetchall())
        return inserted


_SQLITE_MAX_VARIABLES = 900  # below SQLite's oldest limit on bound parameters (999)


def _unique_key(model: type[models.Model], fields: Sequence[str]) -> str:
    """The columns of the unique key `fields` of `model`, quoted, for an ON CONFLICT target. Both
    engines take only the columns of a unique index as a target; checked here, so that a wrong name
    fails in every test that writes, on SQLite too, with the model's name in the message."""
    meta = model._meta
    wanted = set(fields)
    unique = [{field.name} for field in meta.concrete_fields if field.unique]
    unique += [set(names) for names in meta.unique_together]
    unique += [
        set(constraint.fields)
        for constraint in meta.constraints
        if isinstance(constraint, models.UniqueConstraint) and constraint.condition is None and constraint.fields
    ]
    assert wanted in unique, f"{model.__name__} has no unique key on exactly {sorted(wanted)}"
    return ", ".join(connection.ops.quote_name(_column(_stored_field(model, name))) for name in fields)
