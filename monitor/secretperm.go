package monitor

import (
	"fmt"

	"go.uber.org/zap"
)

// SecretFile is a file holding a secret and the config key (or flag)
// that names it, for WarnReadableSecrets.
type SecretFile struct{ Key, Path string }

// NATSSecretFiles are the files of n that hold secrets: nats.creds,
// nats.nkey and nats.tls.key (those set).
func NATSSecretFiles(n NATSConfig) []SecretFile {
	return []SecretFile{{"nats.creds", n.Creds}, {"nats.nkey", n.NKey}, {"nats.tls.key", n.TLS.Key}}
}

// WarnReadableSecrets warns, as ssh does of a private key, of each file
// users other than this process's may read: readable by every user, or
// by a group other than this user's own private group (the group named
// as the user, which the systemd unit's 0640 root:sourcewatch uses).
// It does not refuse one: an operator's container may mount a secret
// 0644. The message names the key, the file, its mode and the fix. Unix
// only; elsewhere modes do not say who may read a file, and nothing is
// said. A file that does not open is left to whoever opens it.
func WarnReadableSecrets(log *zap.Logger, files ...SecretFile) {
	for _, f := range files {
		if f.Path == "" {
			continue
		}
		who, perm, ok := readableByOthers(f.Path)
		if !ok {
			continue
		}
		log.Warn(fmt.Sprintf("%s %s is readable by %s (mode %04o), and it holds a secret: chmod 600 %s (or 0640 with this user's own group)", f.Key, f.Path, who, perm, f.Path),
			zap.String("key", f.Key), zap.String("file", f.Path), zap.String("mode", fmt.Sprintf("%04o", perm)))
	}
}
