//go:build !linux

package forward

import (
	"errors"
	"os"
)

// Off Linux there is no memfd; batches travel as bytes.
const sharedSupported = false

func createSharedFile() (*os.File, error) { return nil, errors.ErrUnsupported }

func mapShared(*os.File, int) ([]byte, error) { return nil, errors.ErrUnsupported }

func unmapShared([]byte) error { return errors.ErrUnsupported }

func closeOnExec(int) {}
