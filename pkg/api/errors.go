package api

import (
	"errors"
	"fmt"
)

// Code classifies a failed call. The set is small and stable; clients map
// each code to a typed error.
type Code string

// The error codes. docs/protocol.md says when each is used.
const (
	CodeBadRequest        Code = "bad_request"        // malformed JSON or envelope
	CodeUnknownMethod     Code = "unknown_method"     // no such method
	CodeInvalidArgument   Code = "invalid_argument"   // params fail validation
	CodeTooLarge          Code = "too_large"          // request line over MaxLineBytes
	CodeNotFound          Code = "not_found"          // no such process or resource
	CodeExists            Code = "exists"             // name already in use
	CodePermissionDenied  Code = "permission_denied"  // caller may not act on it
	CodeConflict          Code = "conflict"           // wrong state for the operation
	CodeTimeout           Code = "timeout"            // deadline passed
	CodeUnavailable       Code = "unavailable"        // feature or device missing
	CodeResourceExhausted Code = "resource_exhausted" // does not fit, over a budget
	CodeInternal          Code = "internal"           // daemon bug or system failure
)

// Codes lists every code, in documentation order.
var Codes = []Code{
	CodeBadRequest, CodeUnknownMethod, CodeInvalidArgument, CodeTooLarge,
	CodeNotFound, CodeExists, CodePermissionDenied, CodeConflict,
	CodeTimeout, CodeUnavailable, CodeResourceExhausted, CodeInternal,
}

// Error is a failed call as the client sees it.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string { return e.Message }

// Errorf builds an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the wire code carried by err, or "" when it has none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// IsNotFound reports whether err carries CodeNotFound.
func IsNotFound(err error) bool { return CodeOf(err) == CodeNotFound }

// IsExists reports whether err carries CodeExists.
func IsExists(err error) bool { return CodeOf(err) == CodeExists }

// IsPermissionDenied reports whether err carries CodePermissionDenied.
func IsPermissionDenied(err error) bool { return CodeOf(err) == CodePermissionDenied }

// IsConflict reports whether err carries CodeConflict.
func IsConflict(err error) bool { return CodeOf(err) == CodeConflict }

// IsTimeout reports whether err carries CodeTimeout.
func IsTimeout(err error) bool { return CodeOf(err) == CodeTimeout }

// IsInvalidArgument reports whether err carries CodeInvalidArgument.
func IsInvalidArgument(err error) bool { return CodeOf(err) == CodeInvalidArgument }
