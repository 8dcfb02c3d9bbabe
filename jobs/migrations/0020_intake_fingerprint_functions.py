"""The intake's fingerprints of its facts as two PL/pgSQL functions (PostgreSQL only; jobs.services.submission.intake_facts).

PostgreSQL planned the fingerprints' eight subqueries afresh on every REST submission (0.66 ms of its CPU,
four times what running them cost); a PL/pgSQL function keeps its statement's plan for the session.
The tables are written out here, as they stand at this migration: a change to intake_facts.SITE_TABLES or
TEAM_TABLES needs a migration that replaces the functions (tests/engine/test_intake_facts.py checks that
the installed functions compute what intake_facts would).
"""

from django.db import migrations

SITE_TABLES = ("jobs_gputype", "jobs_gpunode", "jobs_catalogimage", "jobs_allowedregistry", "jobs_dataset")
TEAM_TABLES = ("jobs_quota", "jobs_dataset_teams", "jobs_teamsecret")
COLUMNS = (
    "count(*) || '.' || coalesce(sum(xmin::text::bigint), 0) || '.' || "
    "coalesce(sum(((ctid::text::point)[0] * 65536 + (ctid::text::point)[1])::bigint), 0)"
)


def _print(tables, where=""):
    return " || '/' || ".join(f"(SELECT {COLUMNS} FROM {table}{where})" for table in tables)


FUNCTIONS = f"""
CREATE OR REPLACE FUNCTION gpuportal_site_facts_print() RETURNS text LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN {_print(SITE_TABLES)};
END
$$;
CREATE OR REPLACE FUNCTION gpuportal_team_facts_print(p_team bigint) RETURNS text LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN {_print(TEAM_TABLES, " WHERE team_id = p_team")};
END
$$;
"""
DROP = """
DROP FUNCTION IF EXISTS gpuportal_site_facts_print();
DROP FUNCTION IF EXISTS gpuportal_team_facts_print(bigint);
"""


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FUNCTIONS)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("jobs", "0019_workspace_use")]

    operations = [migrations.RunPython(create, drop)]
