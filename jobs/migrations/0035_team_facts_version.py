"""A team's facts carry a version row of their own, moved by triggers, so a submission reads one row.

Migration 0020's team fingerprint summed `xmin` and `ctid` over the team's quotas, dataset grants and
secrets on every REST submission (0.12-0.14 ms of PostgreSQL's CPU each: three subqueries, the function's
call). Now every INSERT, UPDATE or DELETE of a row of those tables sets its team's row of
`gpuportal_team_facts_version` to a fresh number from a sequence (an UPDATE that moves a row to another
team moves both teams' versions), whoever sends it: the ORM, a bulk update, raw SQL, psql. TRUNCATE moves
every team's. The submission reads its team's row inline (jobs.sql.team_facts_version), as it reads the
site facts' (migration 0034).

Why so:
- Lock order. A row trigger knows the team but runs after its row is locked; two writers of one team's
  facts could then each hold a fact row and wait for the other's version row. So a statement trigger runs
  first, before any row of the statement is locked, and locks the site facts' version row (0034): every
  writer of facts, site or team, queues on that one row before it locks any row of a fact table, and only
  a transaction holding it touches the teams' version rows. One order for all of them, so no circle among
  writers of facts; what they wait for is short (an admin edit, a secret's state, the inventory sync: each
  a few rows). The row is locked FOR NO KEY UPDATE (as an UPDATE locks it), not written: a team's change
  leaves the site's version, and so every process's copy of the site facts, alone. Readers take no lock.
- A number from a sequence, not version + 1: never handed out twice, so a copy cached from a transaction
  that was rolled back never matches a later version; each row change gets a number of its own.
- The version commits with the change it marks; the facts are read after the version (later statements),
  so a copy is never older than the version it is filed under.
- A team with no version row has never had a fact row written since this migration, which gives every
  team that exists here a row: it reads as `v0` (no quota, grant or secret since), a value no sequence
  number takes.
PostgreSQL only; elsewhere (SQLite in development) the intake reads the team's facts afresh as before.
tests/engine/test_intake_facts.py checks that every table intake_facts.TEAM_TABLES names has both triggers.
"""

from django.db import migrations

TABLES = ("jobs_quota", "jobs_dataset_teams", "jobs_teamsecret")

CREATE = (
    """
CREATE SEQUENCE gpuportal_team_facts_version_seq;
CREATE TABLE gpuportal_team_facts_version (
    team_id bigint PRIMARY KEY,
    version bigint NOT NULL
);
INSERT INTO gpuportal_team_facts_version (team_id, version)
    SELECT id, nextval('gpuportal_team_facts_version_seq') FROM jobs_team ORDER BY id;
CREATE FUNCTION gpuportal_team_facts_writing() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM gpuportal_site_facts_version WHERE id = 1 FOR NO KEY UPDATE;
    IF TG_OP = 'TRUNCATE' THEN
        UPDATE gpuportal_team_facts_version SET version = nextval('gpuportal_team_facts_version_seq');
    END IF;
    RETURN NULL;
END
$$;
CREATE FUNCTION gpuportal_team_facts_move(p_team bigint) RETURNS void LANGUAGE sql AS $$
    INSERT INTO gpuportal_team_facts_version AS v (team_id, version)
    VALUES (p_team, nextval('gpuportal_team_facts_version_seq'))
    ON CONFLICT (team_id) DO UPDATE SET version = excluded.version
$$;
CREATE FUNCTION gpuportal_team_facts_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        PERFORM gpuportal_team_facts_move(OLD.team_id);
    END IF;
    IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND NEW.team_id IS DISTINCT FROM OLD.team_id) THEN
        PERFORM gpuportal_team_facts_move(NEW.team_id);
    END IF;
    RETURN NULL;
END
$$;
CREATE OR REPLACE FUNCTION gpuportal_team_facts_print(p_team bigint) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT 'v' || coalesce((SELECT version FROM gpuportal_team_facts_version WHERE team_id = p_team), 0)
$$;
"""
    + "".join(
        f"CREATE TRIGGER gpuportal_team_facts_writing BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON {table} "
        "FOR EACH STATEMENT EXECUTE FUNCTION gpuportal_team_facts_writing();\n"
        f"CREATE TRIGGER gpuportal_team_facts_changed AFTER INSERT OR UPDATE OR DELETE ON {table} "
        "FOR EACH ROW EXECUTE FUNCTION gpuportal_team_facts_changed();\n"
        for table in TABLES
    )
)

# Back to migration 0020's fingerprint of the team's three tables.
_COLUMNS = (
    "count(*) || '.' || coalesce(sum(xmin::text::bigint), 0) || '.' || "
    "coalesce(sum(((ctid::text::point)[0] * 65536 + (ctid::text::point)[1])::bigint), 0)"
)
_OLD_PRINT = " || '/' || ".join(f"(SELECT {_COLUMNS} FROM {table} WHERE team_id = p_team)" for table in TABLES)
DROP = (
    "".join(
        f"DROP TRIGGER IF EXISTS gpuportal_team_facts_writing ON {table};\n"
        f"DROP TRIGGER IF EXISTS gpuportal_team_facts_changed ON {table};\n"
        for table in TABLES
    )
    + f"""
DROP FUNCTION IF EXISTS gpuportal_team_facts_print(bigint);
CREATE FUNCTION gpuportal_team_facts_print(p_team bigint) RETURNS text LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN {_OLD_PRINT};
END
$$;
DROP FUNCTION IF EXISTS gpuportal_team_facts_changed();
DROP FUNCTION IF EXISTS gpuportal_team_facts_move(bigint);
DROP FUNCTION IF EXISTS gpuportal_team_facts_writing();
DROP TABLE IF EXISTS gpuportal_team_facts_version;
DROP SEQUENCE IF EXISTS gpuportal_team_facts_version_seq;
"""
)


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("jobs", "0034_site_facts_version")]

    operations = [migrations.RunPython(create, drop)]
