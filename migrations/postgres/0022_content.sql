-- Nightshift schema v22 (PostgreSQL): a run's content stored once. Kept in lockstep with
-- migrations/sqlite/0022_content.sql.
--
-- `run_blobs` holds each distinct piece of a run's content once: the skeleton of an event's
-- payload, and every long string of an event or a checkpoint (store/src/content/). `hash`
-- (SHA-256 of the content) makes it content-addressed within the run; `body` is raw deflate
-- against the content written before it in its chain (`chain`: the id of the chain's first
-- blob), so the run's content compresses like one stream and a read decodes one chain at most.
-- An event written from v22 on names its payload's blob (`blob_id`) and keeps `payload` empty;
-- older events keep their payload as they were written. A checkpoint of `encoding` 1 is the
-- gzip of a skeleton whose long strings are blobs; `encoding` 0 is a whole gzipped document.
CREATE TABLE run_blobs (
    id         BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id     TEXT    NOT NULL REFERENCES runs (id),
    chain      BIGINT,
    hash       BYTEA   NOT NULL,
    raw_size   BIGINT  NOT NULL CHECK (raw_size >= 0),
    body       BYTEA   NOT NULL,
    created_at BIGINT  NOT NULL
);
CREATE UNIQUE INDEX run_blobs_hash ON run_blobs (run_id, hash);
CREATE INDEX run_blobs_chain ON run_blobs (chain, id);
ALTER TABLE run_events ADD COLUMN blob_id BIGINT;
ALTER TABLE checkpoints ADD COLUMN encoding BIGINT NOT NULL DEFAULT 0
    CHECK (encoding IN (0, 1));
