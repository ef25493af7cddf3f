package consumer

import (
	"encoding/json"
	"reflect"

	fastjson "github.com/segmentio/encoding/json"
)

// unmarshal decodes JSON into v (a pointer) by encoding/json's rules.
//
// Every message's envelope and payload pass through here, and encoding/json
// was a fifth of a consumer's Go CPU (bench/README.md, "JSON decoding").
// segmentio/encoding/json implements the same rules (case-insensitive member
// names, the last of repeated members, invalid UTF-8 replaced in strings,
// the same Unmarshaler and TextUnmarshaler calls) 3–5 times faster and is
// tried first. On any error v is zeroed and encoding/json decodes it again:
// its result and its error are returned, so the error texts that reach a
// dead letter's x-error header stay the standard library's, and an input
// the fast decoder refuses but encoding/json accepts still decodes.
// TestUnmarshalAgreesWithEncodingJSON (and FuzzUnmarshalAgrees) hold the
// two to the same results.
func unmarshal(data []byte, v any) error {
	if fastjson.Unmarshal(data, v) == nil {
		return nil
	}
	reflect.ValueOf(v).Elem().SetZero()
	return json.Unmarshal(data, v)
}
