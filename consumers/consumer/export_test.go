package consumer

// IsInfrastructure exposes isInfrastructure to the external tests.
var IsInfrastructure = isInfrastructure
