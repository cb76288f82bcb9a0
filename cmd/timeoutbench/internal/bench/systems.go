package bench

// Systems are the delay mechanisms measured, timeoutmill's first, the peer last.
func Systems() []System {
	systems := []System{
		goChannelSystem("GoChannel + memory", openMemory),
		goChannelSystem("GoChannel + SQLite", openSQLite),
		rabbitMQPostgres(),
		sqlTransport(),
		nativeRabbitMQ(),
		watermillPeer(),
	}
	// The stream brokers before the peer, which stays last.
	return append(systems[:len(systems)-1:len(systems)-1], append(streamSystems(), systems[len(systems)-1])...)
}
