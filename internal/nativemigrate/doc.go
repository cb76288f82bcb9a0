// Package nativemigrate moves stored timeouts onto RabbitMQ's native delay (package
// native/rabbitmq) while timeout managers keep running on the store: the `timeoutmill migrate
// --to rabbitmq-native` command. Check runs the preflight alone; Migrate runs it, then hides,
// sends and removes the timeouts batch by batch. native/rabbitmq's documentation (Migration)
// describes what happens on a kill, an interruption or a race with a timeout manager.
package nativemigrate
