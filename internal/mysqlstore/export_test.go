package mysqlstore

// InterpretError exposes the error translation to tests.
var InterpretError = interpretError
