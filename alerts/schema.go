package alerts

import (
	_ "embed" // the schema file ships inside the package
	"slices"
)

//go:embed alert.v1.schema.json
var jsonSchema []byte

// JSONSchema returns the JSON Schema (draft 2020-12) of an alert of schema
// Schema, for consumers in other languages to validate against; the daemon
// serves it at /schema/alert.v1.json. It allows fields it does not name,
// since additive changes keep the version.
func JSONSchema() []byte { return slices.Clone(jsonSchema) }
