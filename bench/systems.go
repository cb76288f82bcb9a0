package bench

// Systems are the delay mechanisms measured, timeoutmill's first, the peer last.
func Systems() []System {
	return []System{
		goChannelSystem("GoChannel + memory", 20000, openMemory),
		goChannelSystem("GoChannel + SQLite", 5000, openSQLite),
		rabbitMQPostgres(),
		sqlTransport(),
		nativeRabbitMQ(),
		watermillPeer(),
	}
}
