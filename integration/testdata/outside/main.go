// The main of the outside module that integration/outside_test.go builds: it
// joins the Go blocks of README.md and docs/GO.md (copied beside it, verbatim)
// into a program that runs README's WithIdempotency block and serves the gin
// and net/http examples.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/gin-gonic/gin"

	"github.com/idemguard/idemguard/routers/middleware"
	"github.com/idemguard/idemguard/sanitize"

	"github.com/idemguard/idemguard/tenancy"
)

// The application's own work, counted so the test sees how often it ran.
var modelCalls, widgets, invoices atomic.Int64

// widget is the gin route's answer: the team's own JSON, with fields the
// route's allowlist keeps (id, name, tags, details) and one it does not.
type widget struct {
	ID      string         `json:"id"`
	Name    string         `json:"name"`
	Tags    []string       `json:"tags"`
	Details map[string]any `json:"details"`
	Secret  string         `json:"internalCost"`
}

func callTheModel(ctx context.Context, text string) (string, error) {
	modelCalls.Add(1)
	return "a fine copy of " + strconv.Itoa(len(text)) + " characters", nil
}

func createWidget(ctx context.Context, name string, tags []string) widget {
	id := "w-" + strconv.FormatInt(widgets.Add(1), 10)
	// details nests a blocked key four levels down: kept as a whole, less it.
	details := map[string]any{"size": map[string]any{"unit": "cm", "dims": map[string]any{"w": 2, "h": map[string]any{"value": 3, "stack": "canary-stack"}}}}
	return widget{ID: id, Name: name, Tags: tags, Details: details, Secret: "canary-cost"}
}

func requestID(r *http.Request) string { return "req-" + r.Header.Get("Idempotency-Key") }

func createInvoice(ctx context.Context) string {
	return "inv-" + strconv.FormatInt(invoices.Add(1), 10)
}

// tenantOf stands in for the application's authentication.
func tenantOf(r *http.Request) (tenancy.ID, error) { return tenancy.ParseID(r.Header.Get("X-Tenant")) }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "outside:", err)
	os.Exit(1)
}

func main() {
	ctx := context.Background()
	guard, db, err := newGuard(ctx, os.Getenv("OUTSIDE_DSN"), []byte(os.Getenv("OUTSIDE_SECRET")))
	if err != nil {
		fail(err)
	}
	defer db.Close()
	defer guard.Close(ctx)

	for range 2 {
		res, err := proposeCopy(ctx, guard, "acme", "copy-1", "Write  a   haiku")
		if err != nil {
			fail(err)
		}
		fmt.Printf("readme: %s cached=%t model_calls=%d %s\n", res.Status, res.Cached, modelCalls.Load(), res.Body)
	}

	// docs/GO.md's "The audit trail": the same call twice as one user, then its key's history.
	audited, err := auditedGuard(db, []byte(os.Getenv("OUTSIDE_SECRET")))
	if err != nil {
		fail(err)
	}
	for range 2 {
		if _, err := proposeCopy(asCaller(ctx, audited, "alice@example.com"), audited, "acme", "copy-audited", "Write a limerick"); err != nil {
			fail(err)
		}
	}
	if err := audited.Close(ctx); err != nil { // writes the queued replay
		fail(err)
	}
	events, err := keyHistory(ctx, audited, "acme", "actionRequests.aiProposeCopy", "copy-audited")
	if err != nil {
		fail(err)
	}
	var kinds []string
	for _, e := range events {
		kinds = append(kinds, string(e.Kind))
	}
	fmt.Printf("audit: %s actor=%s replay=%d\n", strings.Join(kinds, ","), events[len(events)-1].Actor, events[len(events)-1].Replay)

	gin.SetMode(gin.ReleaseMode)
	g := ginApp(guard, tenantOf)
	g.GET("/runs", func(c *gin.Context) { c.String(http.StatusOK, strconv.FormatInt(widgets.Load(), 10)) })
	g.GET("/dropped/:key", func(c *gin.Context) {
		key, err := guard.Key("acme", c.Query("scope"), c.Param("key"))
		if err != nil {
			c.String(http.StatusBadRequest, err.Error())
			return
		}
		info, err := guard.Lookup(c.Request.Context(), key)
		if err != nil {
			c.String(http.StatusNotFound, err.Error())
			return
		}
		c.JSON(http.StatusOK, info.DroppedFields)
	})
	h := http.NewServeMux()
	h.Handle("/", httpApp(guard, tenantOf))
	// The gin route's twin on net/http: the team's own JSON, kept by an allowlist.
	h.Handle("POST /widgets", middleware.Idempotent(middleware.Options{
		Guard: guard, Tenant: tenantOf, KeyRequired: true,
		Keep:    sanitize.MustAllowlist("id", "name", "tags", "details", "code", "field"),
		Headers: []string{"X-Request-Id"},
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Item string   `json:"item"`
			Tags []string `json:"tags"`
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Item == "" {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{"code": "item_required", "field": "item", "error": "item is empty"})
			return
		}
		wd := createWidget(r.Context(), in.Item, in.Tags)
		w.Header().Set("Location", "/widgets/"+wd.ID)
		w.Header().Set("X-Request-Id", requestID(r))
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(wd)
	})))

	h.HandleFunc("GET /runs", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, invoices.Load()) })

	ginLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	go func() { _ = http.Serve(ginLn, g) }()
	go func() { _ = http.Serve(httpLn, h) }()
	fmt.Printf("listening gin=%s http=%s\n", ginLn.Addr(), httpLn.Addr())
	// Serve until stdin closes (the test ends).
	_, _ = bufio.NewReader(os.Stdin).ReadString(0)
}
