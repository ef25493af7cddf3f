package consumer

import "testing"

func TestSetsBinaryParametersMatchesTheKeyNotTheText(t *testing.T) {
	for dsn, want := range map[string]bool{
		"postgres://u:p@h/db?sslmode=disable":                         false,
		"postgres://u:p@h/db?binary_parameters=no":                    true,
		"postgresql://u:p@h/db?sslmode=disable&binary_parameters=yes": true,
		"postgres://u:binary_parameters=x@h/db":                       false,
		"postgres://u:p@h/db?application_name=binary_parameters_x":    false,
		"host=h dbname=db binary_parameters=no":                       true,
		"binary_parameters = yes host=h":                              true,
		"host=h application_name=my_binary_parameters=1":              false,
		"host=h password='binary_parameters' dbname=db":               false,
	} {
		if got := setsBinaryParameters(dsn); got != want {
			t.Errorf("setsBinaryParameters(%q) = %v, want %v", dsn, got, want)
		}
	}
}
