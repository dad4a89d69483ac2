package mysqlstore

// InterpretError and ErrLostRace expose the error translation to tests.
var (
	InterpretError = interpretError
	ErrLostRace    = errLostRace
)
