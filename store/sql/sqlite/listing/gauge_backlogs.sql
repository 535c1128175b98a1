-- The backlogs the metrics gauges show: tool calls waiting for a human's decision and run
-- notices not yet delivered, each with when its oldest began waiting (NULL when none). Both
-- counts walk partial indexes of pending rows only (approvals_pending, notifications_due).
SELECT (SELECT COUNT(*) FROM approvals WHERE status = 'pending') AS approvals,
       (SELECT MIN(requested_at) FROM approvals WHERE status = 'pending') AS oldest_approval,
       (SELECT COUNT(*) FROM notifications WHERE status = 'pending') AS notifications,
       (SELECT MIN(created_at) FROM notifications WHERE status = 'pending') AS oldest_notification
