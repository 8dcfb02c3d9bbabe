"""Site facts carry a version bumped by triggers, so a submission reads one row instead of scanning the tables.

Migration 0020's site fingerprint summed `xmin` and `ctid` over every row of the GPU types, nodes, catalog
images, registries and datasets on every REST submission: a site with hundreds of nodes paid for each of
them per submission. Now a statement-level trigger on each of those tables (and on the GPU health marks,
which the worker's create renders into pod affinity) sets the one row of `gpuportal_site_facts_version`
to a fresh number from a sequence before any INSERT, UPDATE, DELETE or TRUNCATE runs there, whoever sends
it: the ORM, a bulk update, raw SQL, psql. `gpuportal_site_facts_print()` now returns that number (the
portal reads the row inline, jobs.sql.SITE_FACTS_VERSION_SQL: a SQL function is planned at every call).

Why so:
- Before, not after, the statement: a writer takes the version row's lock before the first row lock of its
  statement, so two writers of site facts queue on it instead of deadlocking on each other's rows.
- A number from a sequence, not version + 1: a number is never handed out twice, so a copy cached from a
  transaction that was rolled back cannot match a later version that happens to count to the same value,
  and every statement of one transaction gets a number of its own (a copy read between two of them is
  seen to be stale by the next read in that transaction).
- The version commits with the change it marks: another session sees the new number exactly when it can
  see the new rows. Its facts are read after the version (later statements), so a copy is never older than
  the version it is filed under.
PostgreSQL only; elsewhere (SQLite in development) the intake reads the facts afresh as before.
The tables are written out as they stand here; tests/engine/test_intake_facts.py checks that every table
intake_facts.FACT_TABLES names has the trigger.
"""

from django.db import migrations

TABLES = (
    "jobs_gputype",
    "jobs_gpunode",
    "jobs_catalogimage",
    "jobs_allowedregistry",
    "jobs_dataset",
    "jobs_gpuhealthmark",
)

CREATE = (
    """
CREATE SEQUENCE gpuportal_site_facts_version_seq;
CREATE TABLE gpuportal_site_facts_version (
    id smallint PRIMARY KEY CHECK (id = 1),
    version bigint NOT NULL
);
INSERT INTO gpuportal_site_facts_version (id, version) VALUES (1, nextval('gpuportal_site_facts_version_seq'));
CREATE FUNCTION gpuportal_site_facts_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE gpuportal_site_facts_version SET version = nextval('gpuportal_site_facts_version_seq') WHERE id = 1;
    RETURN NULL;
END
$$;
CREATE OR REPLACE FUNCTION gpuportal_site_facts_print() RETURNS text LANGUAGE sql STABLE AS $$
    SELECT 'v' || version FROM gpuportal_site_facts_version WHERE id = 1
$$;
"""
    + "".join(
        f"CREATE TRIGGER gpuportal_site_facts_changed BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON {table} "
        "FOR EACH STATEMENT EXECUTE FUNCTION gpuportal_site_facts_changed();\n"
        for table in TABLES
    )
)

# Back to migration 0020's fingerprint of the five site tables.
_COLUMNS = (
    "count(*) || '.' || coalesce(sum(xmin::text::bigint), 0) || '.' || "
    "coalesce(sum(((ctid::text::point)[0] * 65536 + (ctid::text::point)[1])::bigint), 0)"
)
_OLD_PRINT = " || '/' || ".join(f"(SELECT {_COLUMNS} FROM {table})" for table in TABLES[:5])
DROP = (
    "".join(f"DROP TRIGGER IF EXISTS gpuportal_site_facts_changed ON {table};\n" for table in TABLES)
    + f"""
DROP FUNCTION IF EXISTS gpuportal_site_facts_print();
CREATE FUNCTION gpuportal_site_facts_print() RETURNS text LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN {_OLD_PRINT};
END
$$;
DROP FUNCTION IF EXISTS gpuportal_site_facts_changed();
DROP TABLE IF EXISTS gpuportal_site_facts_version;
DROP SEQUENCE IF EXISTS gpuportal_site_facts_version_seq;
"""
)


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("jobs", "0033_gpu_type_reserve_deeper_after")]

    operations = [migrations.RunPython(create, drop)]
