// Package storeseam lets code inside this module hand the public
// idemguard.Config an engine.Store of its own: a test's counting or failing
// wrapper around a store. idemguard.Store is sealed, so other modules cannot
// do this; within the module, the root package sets Wrap when it is
// initialized (any package that names idemguard.Config imports it).
package storeseam

import "github.com/idemguard/idemguard/internal/engine"

// Wrap returns s as an idemguard.Store (typed any: this package cannot
// import the root package, which imports it).
var Wrap func(s engine.Store) any
