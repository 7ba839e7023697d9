package monitor

import (
	_ "embed" // the schema file ships inside the package
	"slices"
)

//go:embed event.v1.schema.json
var eventJSONSchema []byte

// EventJSONSchema returns the JSON Schema (draft 2020-12) of a message on
// <prefix>.events.<graph>: an Event or a non-empty array of them. A
// producer can check its messages against it before publishing; the
// daemon serves it at /schema/event.v1.json.
func EventJSONSchema() []byte { return slices.Clone(eventJSONSchema) }
