package sqlserver

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/microsoft/go-mssqldb/msdsn"
)

// redacted stands in for a password in messages.
const redacted = "xxxxx"

// dsnSecrets returns the passwords in dsn, found as the driver reads them and, for a DSN it
// cannot read, as a person most likely meant them, so that an error about a malformed DSN hides
// them too. Longest first, so that a password that contains another is replaced whole. (The
// driver's parser reads any certificate file the DSN names; it has no other effect.)
func dsnSecrets(dsn string) []string {
	var secrets []string
	add := func(s string) {
		if s != "" && !slices.Contains(secrets, s) {
			secrets = append(secrets, s)
		}
	}
	if cfg, err := msdsn.Parse(dsn); err == nil {
		add(cfg.Password)
		add(cfg.ChangePassword)
	}
	// URL: the userinfo after the first ':', up to the last '@'; and password=... in the query.
	if _, rest, ok := strings.Cut(dsn, "://"); ok {
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if _, password, ok := strings.Cut(rest[:at], ":"); ok {
				add(password)
				if unescaped, err := url.PathUnescape(password); err == nil {
					add(unescaped)
				}
			}
		}
		if _, query, ok := strings.Cut(rest, "?"); ok {
			for pair := range strings.SplitSeq(query, "&") {
				if key, value, ok := strings.Cut(pair, "="); ok && isPasswordKey(key) {
					add(value)
					if unescaped, err := url.QueryUnescape(value); err == nil {
						add(unescaped)
					}
				}
			}
		}
	}
	// ADO and ODBC: password=...; and pwd=...;, bare, quoted or braced.
	for part := range strings.SplitSeq(strings.TrimPrefix(dsn, "odbc:"), ";") {
		if key, value, ok := strings.Cut(part, "="); ok && isPasswordKey(key) {
			value = strings.TrimSpace(value)
			add(value)
			add(strings.Trim(value, `"{}`))
		}
	}
	slices.SortFunc(secrets, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	return secrets
}

func isPasswordKey(key string) bool {
	switch strings.ToLower(strings.TrimSpace(key)) {
	case "password", "pwd", "change password":
		return true
	}
	return false
}

// redactSecrets replaces every secret in s, as written and as a message might quote or escape
// it, with "xxxxx".
func redactSecrets(s string, secrets []string) string {
	for _, secret := range secrets {
		quoted := strconv.Quote(secret)
		for _, form := range []string{secret, quoted[1 : len(quoted)-1], url.QueryEscape(secret), url.PathEscape(secret)} {
			s = strings.ReplaceAll(s, form, redacted)
		}
	}
	return s
}

// redactDSN returns dsn with its passwords replaced.
func redactDSN(dsn string) string {
	return redactSecrets(dsn, dsnSecrets(dsn))
}

// redactedError is an error whose message had the DSN's passwords removed. It still unwraps to
// the driver's error, so that callers can test it with errors.Is and errors.As.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redactError returns err with the secrets removed from its message, or err itself when its
// message holds none.
func redactError(err error, secrets []string) error {
	if err == nil {
		return nil
	}
	msg := redactSecrets(err.Error(), secrets)
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

// parseDSN reads dsn as go-mssqldb does. Its error never holds a password.
func parseDSN(dsn string) (msdsn.Config, error) {
	if dsn == "" {
		return msdsn.Config{}, errors.New("sqlserver: invalid config: DSN must be set for Open")
	}
	cfg, err := msdsn.Parse(dsn)
	if err != nil {
		return msdsn.Config{}, redactError(fmt.Errorf("sqlserver: invalid config: DSN: %w", err), dsnSecrets(dsn))
	}
	return cfg, nil
}

// serverName names the server a DSN points at, for messages: host, instance and port as given.
func serverName(cfg msdsn.Config) string {
	name := cfg.Host
	if name == "" {
		name = "localhost"
	}
	if cfg.Instance != "" {
		name += `\` + cfg.Instance
	}
	if cfg.Port != 0 {
		name += ":" + strconv.FormatUint(cfg.Port, 10)
	}
	return name
}
