// Package tenancy holds tenant identity: the validated tenant [ID] and the
// tenant carried in a [context.Context].
//
// A tenant ID is 1 to 64 characters of [A-Za-z0-9._-]. It is validated and
// never truncated or normalised: two tenants that differ only beyond the 64th
// character, or only in letter case, must never be confused, and a truncated
// tenant would be a collision in the idempotency table. IDs are compared
// exactly (case-sensitively).
//
// Use [ParseID] at the edge (API-key authentication, configuration) and pass
// [ID] values inward; [WithTenant] and [FromContext] carry the tenant of a
// request through its context.
package tenancy
