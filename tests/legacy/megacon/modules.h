/* modules.h: the megacon driver's modules (each a .c file built with coverse-cpm). */
#ifndef MEGACON_MODULES_H
#define MEGACON_MODULES_H

#include <conv-cpm.h>

void Cpm_megacon_ack(CpmDestination dest); /* in megacon.cpm.h */
int one_ack(void);
int every_pe_acks(void);

void ring_moduleinit(void);
void ring_init(void);
void fibthr_moduleinit(void);
void fibthr_init(void);
void future_moduleinit(void);
void future_init(void);
void prio_moduleinit(void);
void prio_init(void);

#endif
