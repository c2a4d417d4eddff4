// Package testmsg holds the messages that protoalias's tests decode: one
// per syntax (proto2, proto3, edition 2023, and the opaque API), each with
// bytes and message fields in every position the decoder treats apart
// (singular, repeated, oneof, map value, extension, group and delimited
// encodings, required fields). Only tests import it.
package testmsg

//go:generate sh gen.sh
