-- Deliveries whose last attempt was claimed by a daemon that stopped before it recorded the
-- outcome (the claim's lease ran out): dead, keeping the error before it. $1 now
UPDATE notifications SET
    status = 'dead',
    last_error = 'the daemon making attempt ' || attempts || ' of ' || max_attempts
                 || ' stopped before it recorded the outcome'
                 || COALESCE('; the attempt before failed with: ' || last_error, ''),
    updated_at = $1
WHERE status = 'pending' AND attempts >= max_attempts AND next_attempt_at <= $1
