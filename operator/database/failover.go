package database

// ConditionFailover says whether automatic failover watches the primary,
// and each failover's step.
const ConditionFailover = "Failover"

// primaryWatch is what the operator saw of each Database's primary.
type primaryWatch struct{}
