package testdb

import (
	"context"
	"fmt"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcmysql "github.com/testcontainers/testcontainers-go/modules/mysql"
)

// ContainerImage is the image started when tests fall back to Docker.
const ContainerImage = "mysql:8.4"

// dockerAvailable reports whether testcontainers can reach a Docker engine, using its own health
// check (the one behind testcontainers.SkipIfProviderIsNotHealthy).
func dockerAvailable() (ok bool) {
	defer func() {
		if recover() != nil { // testcontainers panics on some broken Docker setups
			ok = false
		}
	}()
	provider, err := testcontainers.ProviderDocker.GetProvider()
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return provider.Health(ctx) == nil // Health closes the provider
}

// startContainer starts the one MySQL container shared by every test of this process.
//
// It is never terminated by this package: a package-level container outlives every test, so
// t.Cleanup cannot stop it. testcontainers' reaper (Ryuk) removes it when the test process exits.
func startContainer() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ctr, err := tcmysql.Run(ctx, ContainerImage,
		tcmysql.WithUsername("root"),
		tcmysql.WithPassword("idemguard"),
		testcontainers.WithCmdArgs("--max-connections=1000"),
	)
	if err != nil {
		return "", fmt.Errorf("start %s container: %w", ContainerImage, err)
	}
	dsn, err := ctr.ConnectionString(ctx)
	if err != nil {
		return "", fmt.Errorf("%s container address: %w", ContainerImage, err)
	}
	return dsn, nil
}
