package bench

// rabbitMQPostgres1KB names the RabbitMQ + PostgreSQL backlog with 1 KB payloads.
const rabbitMQPostgres1KB = "RabbitMQ + PostgreSQL, 1 KB payloads"

// Systems are the delay mechanisms measured, timeoutmill's first, the yardsticks run through
// the same workloads after the system they measure, the peer last. The full run also drains the
// RabbitMQ + PostgreSQL backlog with 1 KB payloads, unless every scenario has them (-payload).
func Systems(plan Plan) []System {
	systems := []System{
		goChannelSystem("GoChannel + memory", openMemory),
		goChannelSystem("GoChannel + SQLite", openSQLite),
		rabbitMQPostgres(),
	}
	if plan.Mode == Full && (plan.Payload == 0 || plan.Payload == DefaultPayload) {
		kb := rabbitMQPostgres()
		kb.Name, kb.Payload, kb.Kinds = rabbitMQPostgres1KB, 1024, []Kind{KindBacklog}
		systems = append(systems, kb)
	}
	systems = append(systems,
		sqlTransport(),
	)
	systems = append(systems, timerHopSystems()...)
	systems = append(systems,
		nativeRabbitMQ(),
		nativePlain(),
	)
	// The stream brokers and their one-hop yardsticks, JetStream's own schedules beside the
	// emulated NATS row, then the peer, last.
	systems = append(systems, streamSystems()...)
	systems = append(systems, streamTimerHops()...)
	systems = append(systems, natsScheduleSystems()...)
	systems = append(systems, natsHybrid())
	return append(systems, watermillPeer())
}
