// Package forwardtest helps test forward models and the plugin host: it
// builds real plugin binaries once per test binary and runs the
// finite-difference check of a model's vector-Jacobian product.
package forwardtest
