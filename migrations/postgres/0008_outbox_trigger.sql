-- Nightshift schema v8 (PostgreSQL): the run_outbox trigger function, planned once per
-- connection. Kept in lockstep with migrations/sqlite/0008_outbox_trigger.sql.
--
-- Version 5's function built its INSERT with EXECUTE format(...) so that it could name the
-- schema of the table that fired it. PL/pgSQL parses and plans such a statement on every
-- call, and the call comes with every run that ends: profiled, it was a fifth of the
-- server's time in a batch of acks. This version writes the schema the migration runs in
-- (the first of the search_path, where version 5 created the table, the trigger and the
-- function) into the function as a constant, so the INSERT is an ordinary statement whose
-- plan is cached. Several Nightshift schemas in one database still never cross: each has its
-- own function naming its own outbox. (Renaming a schema would need this function made
-- again; Nightshift never renames one.)
DO $migration$
BEGIN
    EXECUTE format($function$
        CREATE OR REPLACE FUNCTION %1$I.run_outbox_on_terminal() RETURNS trigger
        LANGUAGE plpgsql AS $body$
        BEGIN
            INSERT INTO %1$I.run_outbox (run_id, status, created_at)
            VALUES (NEW.id, NEW.status, COALESCE(NEW.finished_at, NEW.updated_at));
            RETURN NULL;
        END
        $body$
    $function$, current_schema());
END
$migration$;
