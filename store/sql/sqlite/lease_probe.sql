SELECT status, lease_token, cancel_requested_at FROM jobs WHERE id = ?1
