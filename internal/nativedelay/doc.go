// Package nativedelay is the machinery of RabbitMQ's native delay (package native/rabbitmq): the
// routing keys of the 28 delay levels, the topology of exchanges, queues and bindings that
// carries them, its setup and verification, and the confirmed, mandatory sending on one channel
// that the Publisher and the probes of Verify share. See native/rabbitmq's documentation for the
// design; `timeoutmill native setup` and `timeoutmill native verify` run Setup and Verify.
package nativedelay
