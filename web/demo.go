// Package web holds the TypeScript client and the demo page's sources. For
// Go it carries one thing: the demo page's HTML, which `idemguard serve`
// embeds as it stands here (its script is built into internal/webui). It is
// not part of the module's promised API.
package web

import _ "embed"

//go:embed demo/index.html
var demoPage string

// DemoPage is demo/index.html: the page `idemguard serve` shows at / in
// development mode.
func DemoPage() string { return demoPage }
