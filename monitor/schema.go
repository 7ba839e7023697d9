package monitor

import (
	_ "embed" // the schema file ships inside the package
	"slices"
)

//go:embed event.v1.schema.json
var eventJSONSchema []byte

//go:embed service.v1.schema.json
var serviceJSONSchema []byte

// EventJSONSchema returns the JSON Schema (draft 2020-12) of a message on
// <prefix>.events.<graph>: an Event or a non-empty array of them. A
// producer can check its messages against it before publishing; the
// daemon serves it at /schema/event.v1.json.
func EventJSONSchema() []byte { return slices.Clone(eventJSONSchema) }

// ServiceJSONSchema returns the JSON Schema (draft 2020-12) of the micro
// service's bodies: its $defs localize_request, localize_response,
// window_request, window_response, status_response (also GET /status)
// and reload_response. Replies refer
// to the alert schema (alerts.JSONSchema) by its $id, so a validator needs
// both. The daemon serves it at /schema/service.v1.json.
func ServiceJSONSchema() []byte { return slices.Clone(serviceJSONSchema) }
