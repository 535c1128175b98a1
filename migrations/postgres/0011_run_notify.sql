-- Nightshift schema v11 (PostgreSQL): only runs that notify write an outbox row. Kept in
-- lockstep with migrations/sqlite/0011_run_notify.sql.
--
-- runs.notify says whether the run's end is a notice for its agent's notify URLs. The store
-- sets it when the run is enqueued, from the agents its process was told notify (the daemon
-- and the CLI tell it from nightshift.toml: agents with `[[agents.notify]]` entries). Runs
-- that were already there keep notifying (the default), as they did before this version.
--
-- Why: every run that ended wrote an outbox row (a PL/pgSQL call, a heap row and three index
-- entries), and for an agent without notify URLs the notifier then marked it expanded with
-- nothing to deliver. Measured on the queue bench (2,000 no-op runs drained by 4 slots, one
-- settle statement per batch of ends and claims), the drain ran 12-17% faster without those
-- rows. The trigger now skips such runs in its WHEN clause, which PostgreSQL evaluates before
-- calling anything.
ALTER TABLE runs ADD COLUMN notify BOOLEAN NOT NULL DEFAULT TRUE;

DROP TRIGGER run_outbox_on_terminal ON runs;
CREATE TRIGGER run_outbox_on_terminal AFTER UPDATE OF status ON runs
FOR EACH ROW
WHEN (NEW.notify
      AND NEW.status IN ('succeeded', 'failed', 'cancelled', 'budget_exhausted', 'max_rounds',
                         'superseded')
      AND OLD.status NOT IN ('succeeded', 'failed', 'cancelled', 'budget_exhausted',
                             'max_rounds', 'superseded'))
EXECUTE FUNCTION run_outbox_on_terminal();
