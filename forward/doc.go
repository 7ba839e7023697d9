// Package forward owns the forward-model contract of sourcewatch: the Model
// interface, the gRPC protocol and its translators, the go-plugin host that
// launches and supervises plugin processes, and Serve for plugin authors.
//
// A forward model f maps source indicators x in [0,1]^n to infection
// probabilities y = f(x) in [0,1]^n on one graph; inference needs its
// vector-Jacobian product dx = (df/dx)^T dy, and, to save a round trip, the
// fused form for its data term ||target - f(x)||^2 (SquaredErrorVJP, and
// SquaredErrorLoss, which returns the loss per row instead of f(x) and so
// moves a third fewer bytes). The pieces:
//
//   - Model (forward.go): the interface, mirrored 1:1 by the gRPC service
//     sourcewatch.forward.v1.Forward (proto/, generated code in forwardpb).
//   - Serve (server.go): a plugin's whole main; NewServer adapts a Model to
//     the service and checks requests against the configured graph.
//   - Launch and Process (host.go): start a plugin binary with the
//     handshake, a SHA-256 check, AutoMTLS and a parent-death signal; every
//     call has a deadline and every answer is checked for shape, NaN and Inf
//     (ErrBadOutput), so a broken plugin is an error naming it.
//   - The shared batch region (shared.go): on Linux a memfd the plugin
//     inherits, through which the fused calls' x, target and dx travel
//     instead of gRPC when the plugin says in Info that it mapped it.
//   - Supervised (supervise.go): a Model that relaunches a crashed or hung
//     plugin with capped exponential backoff, re-Configures it and retries
//     the interrupted call once, at most 5 relaunches a minute
//     (ErrRelaunchLimit beyond), or as a RelaunchBudget shared with other
//     supervisors allows (budget.go).
//   - CheckVJP and CheckPlugin (check.go, conformance.go): the
//     finite-difference check of a VJP and the conformance report behind
//     `sourcewatch plugin check`.
//
// README.md explains how to write a plugin, in Go or another language.
package forward
