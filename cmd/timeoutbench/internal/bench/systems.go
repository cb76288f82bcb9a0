package bench

// Systems are the delay mechanisms measured, timeoutmill's first, the peer last.
func Systems() []System {
	return []System{
		goChannelSystem("GoChannel + memory", openMemory),
		goChannelSystem("GoChannel + SQLite", openSQLite),
		rabbitMQPostgres(),
		sqlTransport(),
		nativeRabbitMQ(),
		watermillPeer(),
	}
}
