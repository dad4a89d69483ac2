package routers

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
)

const openAPIPath = "../docs/openapi.yaml"

// routeStatuses lists, per route, every status its handler can answer
// (routers_test.go proves each). The document must list exactly these: a new
// route needs a row here and a path in docs/openapi.yaml.
var routeStatuses = map[string][]int{
	"POST /v1/ops/{scope}":                   {200, 202, 400, 401, 403, 404, 405, 409, 413, 422, 429, 500, 502, 503},
	"DELETE /v1/ops/{scope}/keys/{key}":      {200, 400, 401, 403, 404, 405, 409, 500, 503},
	"POST /openai/v1/chat/completions":       {200, 400, 401, 404, 405, 409, 413, 422, 429, 500, 502, 503},
	"POST /anthropic/v1/messages":            {200, 400, 401, 404, 405, 409, 413, 422, 429, 500, 502, 503},
	"GET /v1/ops/{scope}/keys/{key}/events":  {200, 204, 400, 401, 404, 405, 429, 500, 503},
	"POST /v1/ops/{scope}/keys/{key}/cancel": {202, 400, 401, 404, 405, 409, 500, 503},
	"GET /v1/ops/{scope}/keys/{key}":         {200, 400, 401, 404, 405, 500, 503},
	"GET /v1/ops/{scope}/keys/{key}/history": {200, 400, 401, 404, 405, 500, 503},
	"GET /healthz":                           {200, 405, 500},
	"GET /readyz":                            {200, 405, 500, 503},
	"HEAD /healthz":                          {200, 405, 500},
	"HEAD /readyz":                           {200, 405, 500, 503},
	"GET /metrics":                           {200, 404, 405, 500},
	"GET /v1/stats":                          {200, 400, 401, 405, 500, 503},
	"GET /ops":                               {200, 404, 405, 500},
	"HEAD /ops":                              {200, 404, 405, 500},
}

// Every route answers 405 with Allow to the methods its path does not accept
// (TestMethodNotAllowedOnEveryPath proves it), so every operation documents it.
const notAllowedStatus = http.StatusMethodNotAllowed

// routeHeaders lists, per route and status, the response headers the
// doorHeaders are the headers of the OpenAI and Anthropic doors: the same
// for both.
var doorHeaders = map[int][]string{
	200: {pipeline.HeaderLocation, pipeline.HeaderKeyRef, pipeline.HeaderReplayed, pipeline.HeaderCompletedAt, pipeline.HeaderPreferenceApplied},
	401: {"WWW-Authenticate"},
	409: {pipeline.HeaderRetryAfter, pipeline.HeaderLocation, pipeline.HeaderKeyRef, pipeline.HeaderPreferenceApplied},
	422: {pipeline.HeaderLocation, pipeline.HeaderKeyRef},
	429: {pipeline.HeaderRetryAfter},
	502: {pipeline.HeaderLocation, pipeline.HeaderKeyRef, pipeline.HeaderReplayed, pipeline.HeaderCompletedAt, pipeline.HeaderPreferenceApplied},
	503: {pipeline.HeaderRetryAfter, pipeline.HeaderLocation, pipeline.HeaderKeyRef},
}

// handler sets and the document must describe.
var routeHeaders = map[string]map[int][]string{
	"POST /v1/ops/{scope}": {
		200: {pipeline.HeaderLocation, pipeline.HeaderKeyRef, pipeline.HeaderReplayed, pipeline.HeaderCompletedAt, pipeline.HeaderPreferenceApplied,
			pipeline.HeaderReplacesAttempt},
		202: {pipeline.HeaderLocation, pipeline.HeaderKeyRef, pipeline.HeaderPreferenceApplied, pipeline.HeaderReplacesAttempt},
		401: {"WWW-Authenticate"},
		409: {pipeline.HeaderRetryAfter, pipeline.HeaderLocation, pipeline.HeaderKeyRef, pipeline.HeaderPreferenceApplied},
		422: {pipeline.HeaderLocation, pipeline.HeaderKeyRef},
		502: {pipeline.HeaderLocation, pipeline.HeaderKeyRef, pipeline.HeaderReplayed, pipeline.HeaderCompletedAt, pipeline.HeaderPreferenceApplied},
		503: {pipeline.HeaderRetryAfter, pipeline.HeaderLocation, pipeline.HeaderKeyRef},
	},
	"POST /openai/v1/chat/completions":       doorHeaders,
	"POST /anthropic/v1/messages":            doorHeaders,
	"GET /v1/ops/{scope}/keys/{key}":         {401: {"WWW-Authenticate"}, 503: {pipeline.HeaderRetryAfter}},
	"GET /v1/ops/{scope}/keys/{key}/history": {401: {"WWW-Authenticate"}, 503: {pipeline.HeaderRetryAfter}},
	"GET /v1/stats":                          {401: {"WWW-Authenticate"}, 503: {pipeline.HeaderRetryAfter}},
	"GET /readyz":                            {503: {pipeline.HeaderRetryAfter}},
	"HEAD /readyz":                           {503: {pipeline.HeaderRetryAfter}},
}

// routeRequestHeaders lists the request headers each route reads.
var routeRequestHeaders = map[string][]string{
	"POST /v1/ops/{scope}":                  {pipeline.HeaderIdempotencyKey, pipeline.HeaderPrefer},
	"POST /openai/v1/chat/completions":      {pipeline.HeaderIdempotencyKey, pipeline.HeaderPrefer},
	"POST /anthropic/v1/messages":           {pipeline.HeaderIdempotencyKey, pipeline.HeaderPrefer},
	"GET /v1/ops/{scope}/keys/{key}/events": {headerLastEventID},
}

type yamlMap = map[string]any

func loadOpenAPI(t *testing.T) yamlMap {
	t.Helper()
	raw, err := os.ReadFile(openAPIPath)
	require.NoError(t, err)
	var doc yamlMap
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	return doc
}

var (
	ginParam = regexp.MustCompile(`[:*]([A-Za-z0-9_]+)`)
	docParam = regexp.MustCompile(`\{([^}]+)\}`)
)

// openAPIRoute turns a gin route into the document's form: :scope → {scope}.
func openAPIRoute(method, path string) string {
	return method + " " + ginParam.ReplaceAllString(path, "{$1}")
}

var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// docOperations returns the document's operations by "METHOD /path".
func docOperations(doc yamlMap) map[string]yamlMap {
	out := map[string]yamlMap{}
	paths, _ := doc["paths"].(yamlMap)
	for path, item := range paths {
		item, _ := item.(yamlMap)
		for _, m := range httpMethods {
			if op, ok := item[m].(yamlMap); ok {
				out[strings.ToUpper(m)+" "+path] = op
			}
		}
	}
	return out
}

// resolve follows a local $ref ("#/components/...").
func resolve(doc yamlMap, node any) yamlMap {
	m, _ := node.(yamlMap)
	for i := 0; i < 10; i++ {
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		var cur any = doc
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			cm, _ := cur.(yamlMap)
			cur = cm[part]
		}
		m, _ = cur.(yamlMap)
	}
	return m
}

// driftProblems compares the document with the routes gin has registered.
func driftProblems(doc yamlMap, routes gin.RoutesInfo) []string {
	var problems []string
	registered := map[string]bool{}
	for _, r := range routes {
		registered[openAPIRoute(r.Method, r.Path)] = true
	}
	documented := docOperations(doc)
	for r := range registered {
		if _, ok := documented[r]; !ok {
			problems = append(problems, fmt.Sprintf("route %s is registered but not documented in docs/openapi.yaml", r))
		}
		if _, ok := routeStatuses[r]; !ok {
			problems = append(problems, fmt.Sprintf("route %s has no row in routeStatuses (openapi_test.go)", r))
		}
	}
	for r, op := range documented {
		if !registered[r] {
			problems = append(problems, fmt.Sprintf("%s is documented but not registered", r))
			continue
		}
		problems = append(problems, responseProblems(doc, r, op)...)
		problems = append(problems, parameterProblems(doc, r, op)...)
	}
	problems = append(problems, namingProblems(doc)...)
	sort.Strings(problems)
	return problems
}

// responseProblems compares the responses the document gives route r
// (operation op) with the statuses and headers the handler answers.
func responseProblems(doc yamlMap, r string, op yamlMap) []string {
	var problems []string
	responses, _ := op["responses"].(yamlMap)
	var got []int
	for code, resp := range responses {
		n, err := strconv.Atoi(code)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s documents response %q: list statuses explicitly", r, code))
			continue
		}
		got = append(got, n)
		if resolve(doc, resp)["description"] == nil {
			problems = append(problems, fmt.Sprintf("%s %d has no description", r, n))
		}
	}
	sort.Ints(got)
	if want := routeStatuses[r]; !slices.Equal(got, want) {
		problems = append(problems, fmt.Sprintf("%s documents statuses %v; the handler answers %v", r, got, want))
	}
	if resp := resolve(doc, responses[strconv.Itoa(notAllowedStatus)]); resp != nil {
		if hs, _ := resp["headers"].(yamlMap); resolve(doc, hs["Allow"]) == nil {
			problems = append(problems, fmt.Sprintf("%s %d does not document the response header Allow", r, notAllowedStatus))
		}
	}
	for status, headers := range routeHeaders[r] {
		resp := resolve(doc, responses[strconv.Itoa(status)])
		documentedHeaders, _ := resp["headers"].(yamlMap)
		for _, h := range headers {
			if resolve(doc, documentedHeaders[h]) == nil {
				problems = append(problems, fmt.Sprintf("%s %d does not document the response header %s", r, status, h))
			}
		}
	}
	return problems
}

// parameterProblems checks the parameters the document gives route r
// (operation op): each path parameter and request header documented, path
// parameters required.
func parameterProblems(doc yamlMap, r string, op yamlMap) []string {
	var problems []string
	params := map[string]string{} // name → in
	pathItem, _ := doc["paths"].(yamlMap)[strings.SplitN(r, " ", 2)[1]].(yamlMap)
	for _, list := range []any{pathItem["parameters"], op["parameters"]} {
		items, _ := list.([]any)
		for _, p := range items {
			p := resolve(doc, p)
			name, _ := p["name"].(string)
			in, _ := p["in"].(string)
			params[name] = in
			if in == "path" && p["required"] != true {
				problems = append(problems, fmt.Sprintf("%s: path parameter %s must be required", r, name))
			}
		}
	}
	for _, m := range docParam.FindAllStringSubmatch(r, -1) {
		if params[m[1]] != "path" {
			problems = append(problems, fmt.Sprintf("%s: path parameter %s is not documented", r, m[1]))
		}
	}
	for _, h := range routeRequestHeaders[r] {
		if params[h] != "header" {
			problems = append(problems, fmt.Sprintf("%s: request header %s is not documented", r, h))
		}
	}
	return problems
}

// camelCase is the JSON naming style of every object the API answers: the
// envelope's (stopReason, createdActionRequestIds), the key record's
// (attemptCount, completedAt) and the problem's (RFC 9457's one-word names).
var camelCase = regexp.MustCompile(`^[a-z][a-zA-Z0-9]*$`)

// namingProblems lists every property of the document's schemas, at any
// depth, whose name is not camelCase.
func namingProblems(doc yamlMap) []string {
	var problems []string
	var walk func(at string, node any)
	walk = func(at string, node any) {
		switch n := node.(type) {
		case yamlMap:
			if props, ok := n["properties"].(yamlMap); ok {
				for name, sub := range props {
					if !camelCase.MatchString(name) {
						problems = append(problems, fmt.Sprintf("%s property %q is not camelCase", at, name))
					}
					walk(at+"."+name, sub)
				}
			}
			for k, v := range n {
				if k != "properties" {
					walk(at, v)
				}
			}
		case []any:
			for _, v := range n {
				walk(at, v)
			}
		}
	}
	schemas, _ := doc["components"].(yamlMap)["schemas"].(yamlMap)
	for name, schema := range schemas {
		walk(name, schema)
	}
	return problems
}

func TestOpenAPIMatchesRouter(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	require.True(t, strings.HasPrefix(fmt.Sprint(doc["openapi"]), "3.1."), "OpenAPI 3.1, got %v", doc["openapi"])

	b := setup(t)
	r, err := newEngine(b.opts)
	require.NoError(t, err)
	require.NotEmpty(t, r.Routes())
	require.Empty(t, driftProblems(doc, r.Routes()))

	// Every route of the status table is registered (the table cannot rot).
	registered := map[string]bool{}
	for _, rt := range r.Routes() {
		registered[openAPIRoute(rt.Method, rt.Path)] = true
	}
	for route := range routeStatuses {
		require.True(t, registered[route], "routeStatuses lists %s, which is not registered", route)
	}
}

// TestOpenAPIDriftIsCaught: the check fails for an undocumented route, a
// documented route that does not exist, and a missing status.
func TestOpenAPIDriftIsCaught(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r, err := newEngine(b.opts)
	require.NoError(t, err)
	r.GET("/v1/extra/:id", func(*gin.Context) {})
	problems := driftProblems(loadOpenAPI(t), r.Routes())
	require.Contains(t, strings.Join(problems, "\n"), "route GET /v1/extra/{id} is registered but not documented")

	doc := loadOpenAPI(t)
	paths := doc["paths"].(yamlMap)
	delete(paths, "/healthz")
	paths["/v2/ghost"] = yamlMap{"get": yamlMap{"responses": yamlMap{"200": yamlMap{"description": "x"}}}}
	ops := paths["/v1/ops/{scope}"].(yamlMap)["post"].(yamlMap)
	delete(ops["responses"].(yamlMap), "413")
	delete(ops["responses"].(yamlMap)["409"].(yamlMap)["headers"].(yamlMap), "Retry-After")
	ops["responses"].(yamlMap)["405"] = yamlMap{"description": "no Allow header"}
	keyRecord := doc["components"].(yamlMap)["schemas"].(yamlMap)["KeyRecord"].(yamlMap)["properties"].(yamlMap)
	keyRecord["attempt_count"] = keyRecord["attemptCount"]
	ops["parameters"] = []any{}
	joined := strings.Join(driftProblems(doc, r.Routes()), "\n")
	for _, want := range []string{
		"route GET /healthz is registered but not documented",
		"GET /v2/ghost is documented but not registered",
		"POST /v1/ops/{scope} documents statuses [200 202 400 401 403 404 405 409 422 429 500 502 503]",
		"POST /v1/ops/{scope} 409 does not document the response header Retry-After",
		"POST /v1/ops/{scope}: request header Idempotency-Key is not documented",
		"POST /v1/ops/{scope} 405 does not document the response header Allow",
		`KeyRecord property "attempt_count" is not camelCase`,
	} {
		require.Contains(t, joined, want)
	}
}

// TestOpenAPISecurity: the document's security matches the router: a route
// documented with bearerAuth answers 401 without credentials, and one
// documented without security does not.
func TestOpenAPISecurity(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	b := setup(t)
	schemes := doc["components"].(yamlMap)["securitySchemes"].(yamlMap)
	bearer := schemes["bearerAuth"].(yamlMap)
	require.Equal(t, "http", bearer["type"])
	require.Equal(t, "bearer", bearer["scheme"])

	for route, op := range docOperations(doc) {
		security, has := op["security"]
		if !has {
			security = doc["security"]
		}
		list, _ := security.([]any)
		needsAuth := len(list) > 0
		method, path, _ := strings.Cut(route, " ")
		path = strings.NewReplacer("{scope}", "echo", "{key}", "some-key").Replace(path)
		w := httptest.NewRecorder()
		b.handler.ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(`{}`)))
		require.Equal(t, needsAuth, w.Code == http.StatusUnauthorized, "%s: documented security %v, answered %d", route, list, w.Code)
	}
	require.Empty(t, b.store.Rows())
}

// TestOpenAPIProblemTypes: the document's Problem.type enum is exactly the set
// of types the handlers answer.
func TestOpenAPIProblemTypes(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	problemSchema := doc["components"].(yamlMap)["schemas"].(yamlMap)["Problem"].(yamlMap)
	var documented []string
	for _, v := range problemSchema["properties"].(yamlMap)["type"].(yamlMap)["enum"].([]any) {
		documented = append(documented, v.(string))
	}

	seen := map[string]bool{}
	for _, err := range []error{
		auth.ErrNoCredentials, auth.ErrInvalidCredentials, pipeline.ErrUnknownScope, pipeline.ErrUnknownModel, pipeline.ErrUnknownRoute, idemguard.ErrNotFound,
		pipeline.ErrMethodNotAllowed, pipeline.ErrMissingKey, pipeline.ErrInvalidKey, pipeline.ErrDuplicateKey, pipeline.ErrInvalidRef, pipeline.ErrBodyTooLarge,
		&http.MaxBytesError{Limit: 1}, pipeline.ErrInvalidBody, idemguard.ErrFingerprintMismatch, idemguard.ErrInvalidInput,
		&idemguard.StoreError{Op: "claim", Err: errors.New("x")}, pipeline.ErrNotReady, pipeline.ErrNoMetrics, errPanic, idemguard.ErrInvalidResult, pipeline.ErrInvalidQuery,
		idemguard.ErrKeyFinished, idemguard.ErrTooManyWatchers, idemguard.ErrTooManyWaiters, pipeline.ErrTooManyAuthFailures,
		idemguard.ErrTooManyLiveStreams, pipeline.ErrInvalidLastEventID,
	} {
		seen[pipeline.ProblemFor(err).Type] = true
	}
	seen[pipeline.ResultProblem(idemguard.Result{Status: idemguard.StatusInProgress}).Type] = true
	seen[pipeline.ResultProblem(idemguard.Result{Status: idemguard.StatusFailed, StatusCode: 502}).Type] = true
	for _, limit := range LimitNames {
		p := pipeline.ProblemFor(&pipeline.LimitError{Limit: limit})
		require.Equal(t, http.StatusTooManyRequests, p.Status, limit)
		seen[p.Type] = true
	}
	var answered []string
	for typ := range seen {
		answered = append(answered, typ)
	}
	sort.Strings(documented)
	sort.Strings(answered)
	require.Equal(t, answered, documented)
}

// TestMethodNotAllowedOnEveryPath: each registered path answers 405, with
// Allow listing exactly the methods registered on it, to every other method;
// nothing runs.
func TestMethodNotAllowedOnEveryPath(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r, err := newEngine(b.opts)
	require.NoError(t, err)
	accepted := map[string][]string{}
	for _, rt := range r.Routes() {
		accepted[rt.Path] = append(accepted[rt.Path], rt.Method)
	}
	for path, methods := range accepted {
		sort.Strings(methods)
		concrete := strings.NewReplacer(":scope", "echo", ":key", "some-key").Replace(path)
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			if slices.Contains(methods, m) {
				continue
			}
			w := b.do(req{method: m, path: concrete, body: `{}`, apiKey: acmeKey1})
			require.Equal(t, notAllowedStatus, w.Code, "%s %s", m, path)
			allow := strings.Split(w.Header().Get("Allow"), ", ")
			sort.Strings(allow)
			require.Equal(t, methods, allow, "%s %s", m, path)
			require.Equal(t, ProblemTypePrefix+"method-not-allowed", problemOf(t, w)["type"])
		}
	}
	require.Empty(t, b.store.Rows())
}

// TestKeyRecordNamesMatchDocument: every name of a key record as answered is
// a property of the document's KeyRecord, and camelCase like the envelope.
func TestKeyRecordNamesMatchDocument(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	props := doc["components"].(yamlMap)["schemas"].(yamlMap)["KeyRecord"].(yamlMap)["properties"].(yamlMap)
	b := setup(t)
	require.Equal(t, http.StatusCreated, b.post("created", "names-1", `{"a":1}`).Code)
	w := b.do(req{method: http.MethodGet, path: "/v1/ops/created/keys/names-1", apiKey: acmeKey1})
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var rec map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &rec))
	require.Contains(t, rec, "attemptCount")
	require.Contains(t, rec, "responseCode")
	for name := range rec {
		require.Regexp(t, camelCase, name)
		require.Contains(t, props, name, "the answer's %q is not in the document's KeyRecord", name)
	}
}
