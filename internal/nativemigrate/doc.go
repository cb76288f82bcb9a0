// Package nativemigrate moves stored timeouts onto a native delay while timeout managers keep
// running on the store: the `timeoutmill migrate --to rabbitmq-native|nats-native` command. A
// Target is RabbitMQ's delay levels (package native/rabbitmq) or NATS JetStream's message
// schedules (package native/nats). Check runs the preflight alone; Migrate runs it, then hides,
// sends and removes the timeouts batch by batch. native/rabbitmq's documentation (Migration)
// describes what happens on a kill, an interruption or a race with a timeout manager.
package nativemigrate
