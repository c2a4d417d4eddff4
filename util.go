package leangrpc

import "errors"

func errorsIs(err, target error) bool     { return errors.Is(err, target) }
func errorsAs(err error, target any) bool { return errors.As(err, target) }
