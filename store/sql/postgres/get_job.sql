SELECT * FROM jobs WHERE id = $1
