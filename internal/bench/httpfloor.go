package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/idemguard/idemguard/internal/mysqlconn"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/tenancy"
)

// The HTTP floor is the least an HTTP service can do for the same outcomes
// as `idemguard serve` on an openai_chat scope, on the same router stack
// (gin in release mode, routers/auth's bearer-key Authenticator): a fresh key is
// the claim INSERT, the upstream call and the nonce-guarded UPDATE; a replay
// is one SELECT by the unique key. No validation, no canonical JSON, no
// HMAC (a SHA-256 names the row), no sanitizing, no request log. It runs as
// a separate process (the bench binary re-executed with envFloor set), so
// its CPU is measured like serve's.
//
// Routes: POST /v1/ops/:scope (fresh path; a 1062 answers from a SELECT;
// the same SQL as serve's with the audit trail on, whose claim event rides
// on the row), POST /floor/replay/:scope (the SELECT alone), the stream
// suite's relays (stream.go: POST /floor/stream/:scope without a claim,
// POST /floor/stream-claimed/:scope with one), and bareFloorPath: the bare
// net/http floor, a fixed body answered before the router, authentication
// and any SQL.

// Environment of the floor process.
const (
	envFloor         = "IDEMGUARD_BENCH_HTTP_FLOOR" // "1": run as the floor server
	envFloorDSN      = "IDEMGUARD_BENCH_FLOOR_DSN"
	envFloorPool     = "IDEMGUARD_BENCH_FLOOR_POOL"
	envFloorUpstream = "IDEMGUARD_BENCH_FLOOR_UPSTREAM" // the chat completions URL
	envFloorKeys     = "IDEMGUARD_BENCH_FLOOR_KEYS"     // tenant:sha256hex of the API key
)

// listeningMsg is the log message (JSON, on stderr) that serve and the floor
// print with the address they listen on.
const listeningMsg = "serve: listening"

// runHTTPFloor serves the floor until SIGTERM or SIGINT; it returns the exit status.
func runHTTPFloor(getenv func(string) string, stderr io.Writer) int {
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn + 1}))
	fail := func(err error) int {
		fmt.Fprintln(stderr, "bench floor:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := strconv.Atoi(getenv(envFloorPool))
	if err != nil {
		return fail(fmt.Errorf("%s: %w", envFloorPool, err))
	}
	tenant, digest, _ := strings.Cut(getenv(envFloorKeys), ":")
	auth, err := auth.NewAuthenticator(map[tenancy.ID][]string{tenancy.ID(tenant): {digest}})
	if err != nil {
		return fail(err)
	}
	openCtx, cancel := context.WithTimeout(ctx, setupTimeout)
	db, err := mysqlconn.Open(openCtx, getenv(envFloorDSN), mysqlconn.PoolConfig{MaxOpenConns: pool})
	cancel()
	if err != nil {
		return fail(err)
	}
	defer db.Close()

	f := &floor{db: db, upstream: getenv(envFloorUpstream), client: &http.Client{Transport: loopbackTransport()}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	srv := &http.Server{Handler: bare(f.handler(auth)), ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	// The same line serve prints, so one parser finds both addresses.
	log.Log(ctx, slog.LevelError+4, listeningMsg, slog.String("addr", ln.Addr().String()))
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fail(err)
	}
	return 0
}

type floor struct {
	db       *sqlx.DB
	upstream string
	client   *http.Client
}

func (f *floor) handler(auth *auth.Authenticator) http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	mw := auth.Middleware(nil)
	authenticate := func(c *gin.Context) {
		passed := false
		mw(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			passed = true
			c.Request = r
			c.Next()
		})).ServeHTTP(c.Writer, c.Request)
		if !passed {
			c.Abort()
		}
	}
	api := r.Group("/", authenticate)
	api.POST("/v1/ops/:scope", f.fresh)
	api.POST("/floor/replay/:scope", f.replay)
	api.POST("/floor/stream/:scope", f.relayStream)           // stream.go
	api.POST("/floor/stream-claimed/:scope", f.claimedStream) // stream.go
	return r
}

// rowName is the floor's (tenant, scope, key_hash) of a request.
func rowName(c *gin.Context) (tenant, scope, keyHash string) {
	id, _ := tenancy.FromContext(c.Request.Context())
	sum := sha256.Sum256([]byte(string(id) + "\x00" + c.Param("scope") + "\x00" + c.GetHeader("Idempotency-Key")))
	return string(id), c.Param("scope"), hex.EncodeToString(sum[:])
}

func (f *floor) fresh(c *gin.Context) {
	ctx := c.Request.Context()
	body, err := io.ReadAll(c.Request.Body)
	if err != nil {
		c.Status(http.StatusBadRequest)
		return
	}
	id, nonce, ok := f.claim(c, body, func(tenant, scope, keyHash string) { f.answerStored(c, tenant, scope, keyHash) })
	if !ok {
		return
	}
	envelope, err := f.callUpstream(ctx, body)
	if err != nil {
		c.Status(http.StatusBadGateway)
		return
	}
	if _, err := f.db.ExecContext(ctx, rawCompleteSQL, string(store.RowSucceeded), envelope, 200, benchTTL.Microseconds(), id, nonce); err != nil {
		c.Status(http.StatusServiceUnavailable)
		return
	}
	c.Data(http.StatusOK, "application/json", envelope)
}

// claim is the floor's claim of the request's key: the claim INSERT with
// a fresh nonce. ok is false when the request has been answered: a
// duplicate key by onDuplicate, an error by its status.
func (f *floor) claim(c *gin.Context, body []byte, onDuplicate func(tenant, scope, keyHash string)) (id int64, nonce string, ok bool) {
	tenant, scope, keyHash := rowName(c)
	fp := sha256.Sum256(body)
	nonce = randomHex(16)
	res, err := f.db.ExecContext(c.Request.Context(), rawClaimSQL, tenant, scope, keyHash, hex.EncodeToString(fp[:]), nonce,
		benchTTL.Microseconds())
	if me := (*mysql.MySQLError)(nil); errors.As(err, &me) && me.Number == 1062 {
		onDuplicate(tenant, scope, keyHash)
		return 0, "", false
	}
	if err == nil {
		id, err = res.LastInsertId()
	}
	if err != nil {
		c.Status(http.StatusServiceUnavailable)
		return 0, "", false
	}
	return id, nonce, true
}

// bareFloorPath is the bare net/http floor's route: what the least HTTP
// server costs, with nothing of a guard (bareBody, the size of a replayed
// chat envelope).
const bareFloorPath = "/floor/bare"

var bareBody = []byte(`{"ok":true,"stopReason":"completed","needsHuman":false,"cached":true,"data":{"completion_tokens":8,` +
	`"finish_reason":"stop","prompt_tokens":12,"text":"Retries, once: the guard remembers.","total_tokens":20}}`)

// bare answers bareFloorPath with bareBody and hands every other request
// to next.
func bare(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != bareFloorPath {
			next.ServeHTTP(w, r)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		h := w.Header()
		h["Content-Type"] = []string{"application/json"}
		_, _ = w.Write(bareBody)
	})
}

func (f *floor) replay(c *gin.Context) {
	tenant, scope, keyHash := rowName(c)
	f.answerStored(c, tenant, scope, keyHash)
}

// answerStored answers with the stored response: one SELECT by the unique key.
func (f *floor) answerStored(c *gin.Context, tenant, scope, keyHash string) {
	var r rawRow
	err := f.db.QueryRowContext(c.Request.Context(), rawGetSQL, tenant, scope, keyHash).Scan(&r.id, &r.tenant, &r.scope,
		&r.keyHash, &r.fp, &r.status, &r.attempts, &r.nonce, &r.response, &r.code, &r.created, &r.started,
		&r.heartbeat, &r.completed, &r.expires, &r.now)
	switch {
	case err != nil:
		c.Status(http.StatusServiceUnavailable)
	case r.status != string(store.RowSucceeded):
		c.Status(http.StatusConflict)
	default:
		c.Data(int(r.code.Int32), "application/json", r.response)
	}
}

// callUpstream forwards the chat request and builds the envelope from the
// answer's first choice, as the openai_chat operation answers.
func (f *floor) callUpstream(ctx context.Context, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.upstream, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("upstream status %d", resp.StatusCode)
	}
	var out chatAnswer
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Choices) == 0 {
		return nil, errors.New("upstream answer is not a chat completion")
	}
	ch := out.Choices[0]
	b := []byte(`{"ok":true,"stopReason":"completed","needsHuman":false,"cached":false,"data":{"completion_tokens":`)
	b = strconv.AppendInt(b, out.Usage.CompletionTokens, 10)
	b = append(b, `,"finish_reason":`...)
	b = strconv.AppendQuote(b, ch.FinishReason)
	b = append(b, `,"prompt_tokens":`...)
	b = strconv.AppendInt(b, out.Usage.PromptTokens, 10)
	b = append(b, `,"text":`...)
	b = strconv.AppendQuote(b, ch.Message.Content)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, out.Usage.TotalTokens, 10)
	return append(b, "}}"...), nil
}

type chatAnswer struct {
	Choices []struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
		TotalTokens      int64 `json:"total_tokens"`
	} `json:"usage"`
}
