package middleware

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRouteScope(t *testing.T) {
	t.Parallel()
	require.Equal(t, "POST:orders.:id", routeScope("POST", "/orders/:id"))
	require.Equal(t, "POST:orders._id_", routeScope("POST", "/orders/{id}"))
	require.Equal(t, "GET:files._filepath", routeScope("GET", "/files/*filepath"))
	require.Empty(t, routeScope("GET", ""))
}
