package nats

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// probeWait bounds how long Verify waits for its probe schedule to fire: the server fires
// schedules in waves at least 250 ms apart.
const probeWait = 10 * time.Second

// Setup creates the schedule stream, or updates it (idempotent): file storage, Config.Replicas,
// message schedules allowed (and with them roll-ups, which a schedule uses to replace the one
// before it on its subject), capturing PREFIX.>. Of a stream that exists it changes only these
// settings and keeps its other subjects (the destinations) and limits. It fails when another
// stream captures PREFIX.>, or when the server is older than 2.12 and does not know message
// schedules.
func (p *Publisher) Setup(ctx context.Context) error {
	p.closeMu.RLock()
	defer p.closeMu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	p.forgetStream()
	s, err := p.js.Stream(ctx, p.cfg.Stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		_, err = p.js.CreateStream(ctx, jetstream.StreamConfig{
			Name:              p.cfg.Stream,
			Description:       "timeoutmill native schedules: PREFIX.<message id> waits for its due time, then goes to its destination subject",
			Subjects:          []string{p.schedulePattern()},
			Storage:           jetstream.FileStorage,
			Retention:         jetstream.LimitsPolicy,
			Replicas:          p.cfg.Replicas,
			AllowMsgSchedules: true,
			AllowRollup:       true,
		})
		if err != nil {
			return fmt.Errorf("nats: creating stream %s: %w", p.cfg.Stream, err)
		}
	case err != nil:
		return fmt.Errorf("nats: reading stream %s: %w", p.cfg.Stream, err)
	default:
		cfg := s.CachedInfo().Config
		if !captures(cfg.Subjects, p.schedulePattern()) {
			cfg.Subjects = append(slices.Clone(cfg.Subjects), p.schedulePattern())
		}
		cfg.AllowMsgSchedules, cfg.AllowRollup, cfg.DenyPurge, cfg.Replicas = true, true, false, p.cfg.Replicas
		if _, err := p.js.UpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("nats: updating stream %s: %w", p.cfg.Stream, err)
		}
	}
	s, err = p.js.Stream(ctx, p.cfg.Stream)
	if err != nil {
		return fmt.Errorf("nats: reading stream %s: %w", p.cfg.Stream, err)
	}
	// A server before 2.12 accepts the stream and silently ignores the setting it does not know.
	if !s.CachedInfo().Config.AllowMsgSchedules {
		return fmt.Errorf("%w: the server kept stream %s without message schedules: it is older than nats-server 2.12", ErrStream, p.cfg.Stream)
	}
	p.logger.Info("Schedule stream ready", nil)
	return nil
}

// Verify checks the schedule stream without changing its configuration, as `timeoutmill native
// verify` does: nil when it exists, allows message schedules, captures the schedule subjects, has
// no limit that would remove a pending schedule (MaxAge, MaxMsgs or MaxBytes with old messages
// discarded, DenyDelete for Cancel) and a probe schedule fires, never early; an error wrapping
// ErrStream that lists each problem otherwise, or another error when it could not check. The
// probe takes up to a second (the server's scheduling waves) and leaves nothing behind.
func (p *Publisher) Verify(ctx context.Context) error {
	p.closeMu.RLock()
	defer p.closeMu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	s, err := p.stream(ctx)
	if err != nil {
		return err
	}
	cfg := s.CachedInfo().Config
	problems := p.streamProblems(cfg)
	if cfg.MaxAge > 0 {
		problems = append(problems, fmt.Sprintf("stream %s removes messages older than %s (MaxAge): a schedule due later than that would be lost", cfg.Name, cfg.MaxAge))
	}
	if cfg.Discard == jetstream.DiscardOld && (cfg.MaxMsgs > 0 || cfg.MaxBytes > 0) {
		problems = append(problems, fmt.Sprintf("stream %s discards its oldest messages at its MaxMsgs or MaxBytes limit: pending schedules among them would be lost (use DiscardNew)", cfg.Name))
	}
	if cfg.DenyDelete {
		problems = append(problems, fmt.Sprintf("stream %s denies deleting messages (DenyDelete): Cancel cannot work", cfg.Name))
	}
	if len(problems) == 0 {
		if err := p.probe(ctx, s); err != nil {
			if !errors.Is(err, ErrStream) {
				return err
			}
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %d problem(s):\n  %s", ErrStream, len(problems), strings.Join(problems, "\n  "))
	}
	p.mu.Lock()
	p.streamOK = true
	p.mu.Unlock()
	return nil
}

// probe schedules a message 100 ms ahead to a subject under the prefix and waits for it to fire.
// Its subjects have two tokens after the prefix, so they never meet a message's schedule
// (PREFIX.<id token>).
func (p *Publisher) probe(ctx context.Context, s jetstream.Stream) error {
	name := watermill.NewShortUUID()
	subject := p.cfg.SubjectPrefix + "._probe." + name
	target := subject + ".fired"
	defer func() {
		cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = s.Purge(cleanup, jetstream.WithPurgeSubject(subject))
		_ = s.Purge(cleanup, jetstream.WithPurgeSubject(target))
	}()
	due := time.Now().Add(100 * time.Millisecond).UTC()
	msg := natsgo.NewMsg(subject)
	msg.Header.Set(headerSchedule, "@at "+due.Format(time.RFC3339Nano))
	msg.Header.Set(headerScheduleTarget, target)
	msg.Header.Set(natsgo.ExpectedStreamHdr, p.cfg.Stream)
	if _, err := p.js.PublishMsg(ctx, msg); err != nil {
		if code := apiCode(err); code != 0 {
			return fmt.Errorf("%w: the probe schedule was refused: %w", ErrStream, err)
		}
		return fmt.Errorf("nats: publishing the probe schedule: %w", err)
	}
	deadline := time.Now().Add(probeWait)
	for time.Now().Before(deadline) {
		fired, err := s.GetLastMsgForSubject(ctx, target)
		if err == nil {
			if fired.Time.Before(due) {
				return fmt.Errorf("%w: the probe schedule fired %s early (the server's clock?)", ErrStream, due.Sub(fired.Time))
			}
			return nil
		}
		if apiCode(err) != codeMessageNotFound {
			return fmt.Errorf("nats: reading the probe: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%w: the probe schedule did not fire within %s", ErrStream, probeWait)
}
