package sanitize

import "unicode/utf8"

// FromValueReport is [FromValue] that also calls dropped with the name of
// every field the allowlist dropped, so that nothing is lost silently. Names
// are paths: "result" (a top-level field that is not an envelope field, or
// an envelope field of the wrong type), "data.details" (a member of data that
// is blocked or not a primitive, e.g. a nested object), "data.tags[]" (some
// elements of an array in data that are not primitives), and
// "createdActionRequestIds[]". Each name is reported at most once per call,
// in no particular order; values are never passed. "cached" is set by the
// guard and never reported. With dropped nil it is FromValue.
func FromValueReport(v any, dropped func(name string)) (Envelope, error) {
	switch e := v.(type) {
	case map[string]any:
		if env, ok := fromMap(e, dropped); ok {
			return env, nil
		}
	case Envelope:
		if env, ok := fromEnvelope(e, dropped); ok {
			return env, nil
		}
	case *Envelope:
		if e != nil {
			if env, ok := fromEnvelope(*e, dropped); ok {
				return env, nil
			}
		}
	}
	top, err := objectOf(v)
	if err != nil {
		return Envelope{}, err
	}
	if dropped != nil {
		reportDropped(top, dropped)
	}
	return fromObject(top), nil
}

// reportDropped mirrors fromObject's rules: what it does not keep, this
// names. A null member is taken as absent.
func reportDropped(top map[string]any, dropped func(string)) {
	for k, v := range top {
		reportMember(k, v, dropped)
	}
}

// reportMember names what fromObject does not keep of the member k: v of
// the decoded top-level object.
func reportMember(k string, v any, dropped func(string)) {
	if v == nil {
		return
	}
	switch k {
	case "ok", "needsHuman":
		if _, ok := v.(bool); !ok {
			dropped(k)
		}
	case "stopReason", "traceId":
		if _, ok := v.(string); !ok {
			dropped(k)
		}
	case "cached":
	case "createdActionRequestIds":
		arr, ok := v.([]any)
		if !ok {
			dropped(k)
		} else if len(sanitizeIDs(arr)) != len(arr) {
			dropped(k + "[]")
		}
	case "data":
		obj, ok := v.(map[string]any)
		if !ok {
			dropped(k)
			return
		}
		reportDroppedData(obj, dropped)
	default:
		dropped(k)
	}
}

// reportDroppedData names what sanitizeData does not keep of obj.
func reportDroppedData(obj map[string]any, dropped func(string)) {
	for dk, dv := range obj {
		if IsBlockedKey(dk) {
			dropped("data." + dk)
			continue
		}
		if arr, ok := dv.([]any); ok {
			for _, el := range arr {
				if _, ok := primitive(el); !ok {
					dropped("data." + dk + "[]")
					break
				}
			}
		} else if _, ok := primitive(dv); !ok {
			dropped("data." + dk)
		}
	}
}

// fromEnvelope is FromValueReport(e, dropped) without the object
// json.Marshal(e) encodes (envelopeObject) between: the fields are read
// as fromObject reads them from it, and only data is copied (genericOf)
// and sanitized. ok is false where envelopeObject declines (invalid
// UTF-8, a data value genericOf does not convert): the caller then takes
// the general path.
func fromEnvelope(e Envelope, dropped func(string)) (Envelope, bool) {
	if !utf8.ValidString(string(e.StopReason)) || !utf8.ValidString(e.TraceID) {
		return Envelope{}, false
	}
	var data map[string]any
	if len(e.Data) > 0 {
		g, ok := genericOf(e.Data, 1)
		if !ok {
			return Envelope{}, false
		}
		data = g.(map[string]any)
	}
	out := Envelope{OK: e.OK, StopReason: Completed, NeedsHuman: e.NeedsHuman, TraceID: truncateUTF8(e.TraceID, MaxTraceIDBytes)}
	if !out.OK {
		out.StopReason = Unknown
	}
	if e.StopReason != "" {
		out.StopReason = ParseStopReason(string(e.StopReason))
	}
	if len(e.CreatedActionRequestIDs) > 0 {
		ids := idValues(e.CreatedActionRequestIDs)
		out.CreatedActionRequestIDs = sanitizeIDs(ids)
		if dropped != nil && len(out.CreatedActionRequestIDs) != len(ids) {
			dropped("createdActionRequestIds[]")
		}
	}
	if data != nil {
		if dropped != nil {
			reportDroppedData(data, dropped)
		}
		out.Data = sanitizeData(data)
	}
	return out, true
}

// fromMap is FromValueReport(top, dropped) without the copy of top that
// genericOf makes: top's members are read where they are, as fromObject
// reads them from the copy, and only data and createdActionRequestIds, the
// two it keeps parts of, are converted (copied). ok is false where
// genericOf declines top (a nil map, invalid UTF-8, a member it does not
// convert): the caller then takes the general path. TestGenericOfMatchesMarshal
// and FuzzGenericOf hold it to the json.Marshal path.
func fromMap(top map[string]any, dropped func(string)) (Envelope, bool) {
	if top == nil {
		return Envelope{}, false
	}
	var ids, data any
	for k, v := range top {
		if !utf8.ValidString(k) {
			return Envelope{}, false
		}
		ok := false
		switch k {
		case "createdActionRequestIds":
			ids, ok = genericOf(v, 1)
		case "data":
			data, ok = genericOf(v, 1)
		default:
			// Only whether it converts matters: a scalar converts without
			// an allocation, and fromMembers reads the members as they are.
			_, ok = genericOf(v, 1)
		}
		if !ok {
			return Envelope{}, false
		}
	}
	if dropped != nil {
		for k, v := range top {
			switch {
			case k == "createdActionRequestIds":
				v = ids
			case k == "data":
				v = data
			case null(v):
				v = nil // what genericOf makes of it
			}
			reportMember(k, v, dropped)
		}
	}
	// The other members keep their type through genericOf (a bool, a
	// string), or become one fromMembers does not take either way.
	return fromMembers(top["ok"], top["stopReason"], top["needsHuman"], top["traceId"], ids, data), true
}

// null reports whether genericOf converts v to nil (JSON null).
func null(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case map[string]any:
		return x == nil
	case []any:
		return x == nil
	case *Envelope:
		return x == nil
	}
	return false
}
