// The wake word's turn in the core: the detector's wake, the earcon, and a turn made
// the way a press of the button makes one (`talk`), ended by the voice flag.
import Wire
import JSON

extension AgentCore {
    /// The wake-word detector fired (the runtime's wake thread, through the loop).
    /// Cuts a reply at once (the user said the word over it), plays the earcon, and
    /// opens the microphone when the earcon has played (`WakeTurn`).
    public func wake(score: Double, now: Instant) {
        self.now = now
        guard settings.wakeWord, life == .running else { return }
        // A button held down owns the turn.
        if talking, !wakeTurn.isOpen { return }
        let cut = assistantSpeaking
        record("wake", [("score", .number(JSONNumber(score))), ("over_assistant", .bool(cut))])
        log(.info, "wake word (score \(Int(score * 100)) %)" + (cut ? ": cutting the reply" : ""))
        if cut {
            bargeIns.button += 1
            // At the word, not once the earcon has played: its playback is flushed.
            if conversation.wakeOverAssistant(now: now) { drainConversation() }
            duck(false)
        }
        // On demand the session starts while the earcon plays (its press's audio is
        // kept until the session is configured: OnDemand.swift).
        if settings.onDemand, supervisor.state == .paused { startOnDemand(now: now) }
        if wakeTurn.isOpen {
            // Said again during the turn: a new turn (what was said so far is dropped).
            talk(false, now: now, wake: true)
        }
        apply(wakeTurn.wake(now: now), now: now)
        lastActivity = now
        driveSupervisor()
    }

    /// The voice flag at each frame while a wake turn listens (zero: off).
    public func wakeVoice(heldFor: Duration, now: Instant) {
        guard wakeTurn.isOpen else { return }
        self.now = now
        if let a = wakeTurn.voice(heldFor: heldFor, now: now) { apply(a, now: now) }
    }

    func wakeTimeout(now: Instant) {
        if let a = wakeTurn.timeout(now: now) { apply(a, now: now) }
    }

    private func apply(_ a: WakeAction, now: Instant) {
        switch a {
        case .earcon:
            emit(.earcon)
        case .open:
            record("wake_turn", [("open", true)])
            talk(true, now: now, wake: true)
        case .close:
            record("wake_turn", [("open", false), ("spoke", true)])
            talk(false, now: now, wake: true)
        case .abandon:
            record("wake_turn", [("open", false), ("spoke", false)])
            log(.info, "wake word: nothing said, the turn is dropped")
            talking = false
            conversation.abandon(now: now)
            setMuted(true)
            drainConversation()
            writeStatus()
            updateBusy()
        }
    }
}
