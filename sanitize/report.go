package sanitize

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
		if v == nil {
			continue
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
				continue
			}
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
		default:
			dropped(k)
		}
	}
}
