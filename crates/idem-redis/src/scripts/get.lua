-- get: KEYS[1] record. Returns the server time and the record's fields.
return {fmt(now_ms()), redis.call('HGETALL', KEYS[1])}
