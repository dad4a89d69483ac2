package routers

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The repository's license and the API document's agree: Apache-2.0.
func TestLicense(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile("../LICENSE")
	require.NoError(t, err)
	require.True(t, strings.Contains(string(text), "Apache License") && strings.Contains(string(text), "Version 2.0, January 2004"),
		"LICENSE is not the Apache License 2.0")
	license := loadOpenAPI(t)["info"].(yamlMap)["license"].(yamlMap)
	require.Equal(t, "Apache-2.0", license["identifier"])
	require.Equal(t, "Apache-2.0", license["name"])
}
