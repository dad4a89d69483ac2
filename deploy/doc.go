// Package deploy holds no code: it is where the container image (Dockerfile), the Helm chart
// (helm/idemguard) and the manifests rendered from it (manifests/) live, and its tests check
// them: the chart renders into valid Kubernetes objects that run the binary as it is configured,
// the image runs the quick start, migrates and cleans up, and the release builds.
//
// Tests that need a tool (helm, podman and runc, goreleaser) skip with a message when it is
// missing, and fail when CI=true: .ci/run installs them.
package deploy
