/*
 * kepttally — what the witnesses of kept fds (keptfd.h) come to, per uid
 * and per device: how many a uid has, how many were found held, and the
 * bytes they charge.
 *
 * keptfd.c changes these as its witnesses are made, found and closed;
 * the others only read them: admission (a uid's witnesses found held
 * count as its buffers), the user's usage (session.c: its VRAM charged)
 * and the pools' charge (outside.c). Keeping the figures here, apart from
 * the looking, lets those readers ask without calling into keptfd.c,
 * which itself calls outside.c when the charges change: no circle of
 * calls between the three. The bound a uid's witnesses share with its
 * buffers ([limits] max_buffers_per_user in effect) is here for the same
 * reason: keptfd.c and admission.c both apply it.
 *
 * Plain bookkeeping on the loop thread: a few users at a time, so a uid
 * is found by a walk of an array.
 */
#ifndef GMD_KEPTTALLY_H
#define GMD_KEPTTALLY_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "gpumem.h"
#include "server_limits.h"

typedef struct gmd_config gmd_config;

/* Per uid with witnesses: how many, and the VRAM bytes charged. */
typedef struct kepttally_user {
        uid_t uid;
        unsigned count;         /* witnesses */
        unsigned found;         /* of those, found held (not KEPTFD_NEW) */
        uint64_t vram;
} kepttally_user;

typedef struct gmd_kepttally {
        kepttally_user *users;
        unsigned n_users, cap_users;
        unsigned n_charged;     /* witnesses charged */
        uint64_t vram_on[GMD_MAX_DEVICES];  /* VRAM bytes charged */
        uint64_t host;          /* pinned host bytes charged */
} gmd_kepttally;

/* max_buffers_per_user in effect: the config's, or half the open-file
 * limit when it is 0. A uid's buffers and its witnesses found held count
 * against it together (admission.h); its witnesses alone never pass it. */
unsigned kepttally_bound(const gmd_config *config);

/* One witness more for `uid`. 0, or -ENOMEM (nothing changed). */
int kepttally_add(gmd_kepttally *t, uid_t uid);

/* A witness of `uid` was found held for the first time. */
void kepttally_found(gmd_kepttally *t, uid_t uid);

/* A witness of `uid`, of `size` bytes on `tier` of `device`, starts
 * (`on`) or stops being charged. */
void kepttally_charge(gmd_kepttally *t, uid_t uid, gmd_tier tier,
                      unsigned device, uint64_t size, bool on);

/* A witness of `uid` is closed; `found`: it had been found held. Its
 * charge, if any, ended first (kepttally_charge). */
void kepttally_drop(gmd_kepttally *t, uid_t uid, bool found);

/* `uid`'s witnesses, those of them found held (those not looked for yet
 * are the fds of buffers just freed, as many as it had), and the VRAM
 * bytes charged to it for them. */
unsigned kepttally_count(const gmd_kepttally *t, uid_t uid);
unsigned kepttally_found_count(const gmd_kepttally *t, uid_t uid);
uint64_t kepttally_vram(const gmd_kepttally *t, uid_t uid);

/* Bytes charged on `tier` of `device` (the host tier: any device). */
uint64_t kepttally_charged(const gmd_kepttally *t, gmd_tier tier,
                           unsigned device);

/* Free the table (the figures go with it). */
void kepttally_free(gmd_kepttally *t);

#endif
